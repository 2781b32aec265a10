"""``GET /console/events``: the numbers a page shows, pushed as server-sent events.

A page names what it shows (``view`` and, for accounts, the ids on the page); the
stream runs the same query the page ran, as the same user, every ``tick`` seconds and
sends the values that changed as one ``update`` event (``{data-live key: text}``), so a
change reaches the page within a tick plus the query's time. Bounded: a session holds
at most ``streams_per_session`` streams and a tenant ``streams_per_tenant`` (429
beyond); a comment line every ``heartbeat`` seconds keeps proxies from closing a quiet
stream; the key is authenticated again every ``recheck`` seconds; and the stream ends
(an ``end`` event) when its session does — signed out, expired, or its key revoked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response, StreamingResponse

from application import read_models
from infrastructure.http.console.accounts import live_fields, summary
from infrastructure.http.console.fleet import fleet_of, live_fleet
from infrastructure.http.console.gate import Signed
from infrastructure.http.console.pages import Console

MAX_IDS = 100


@dataclass(frozen=True)
class LiveSettings:
    tick: float = 0.5
    heartbeat: float = 15.0
    recheck: float = 5.0


async def values(console: Console, signed: Signed, view: str, ids: set[str]) -> dict[str, str]:
    if view == "accounts":
        payload = {"accountIds": sorted(ids), "limit": MAX_IDS}
        result = await console.query(signed, "list-mail-accounts", payload)
        if result.data is None:
            return {}
        found = {f"summary.{k}": str(v) for k, v in summary(result.data["statusCounts"]).items()}
        for account in result.data["items"]:
            found |= live_fields(account)
        return found
    if view == "fleet":
        fleet = await fleet_of(console, signed, console.fleet)
        return live_fleet(fleet.data) if fleet.data is not None else {}
    if view == "projections":
        result = await console.call(
            lambda: read_models.status(console.app.projections, signed.user)
        )
        if result.data is None:
            return {}
        return {
            f"{row['name']}.{field}": f"{row[field]:,}"
            for row in result.data["readModels"]
            for field in ("position", "head", "lag", "quarantined")
        }
    return {}


def live_routes(api: FastAPI, console: Console, settings: LiveSettings) -> None:
    @api.get("/console/events", include_in_schema=False)
    async def events(request: Request) -> Response:
        signed = await console.require(request)
        view = request.query_params.get("view", "")
        raw_ids = request.query_params.get("ids", "")[: MAX_IDS * 65]
        ids = {i for i in raw_ids.split(",") if i and len(i) <= 64}
        if len(ids) > MAX_IDS:
            return console.refused(signed, 400, "Too many ids for one stream.")
        sessions = console.gate.sessions
        if not sessions.take_stream(signed.session):
            return console.refused(signed, 429, "Too many live streams are open.")
        return StreamingResponse(
            _stream(console, signed, view, ids, settings),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )


async def _stream(
    console: Console, signed: Signed, view: str, ids: set[str], settings: LiveSettings
) -> AsyncIterator[bytes]:
    session = signed.session
    loop = asyncio.get_running_loop()
    sent: dict[str, str] = {}
    last_out = last_check = loop.time()
    try:
        yield b"retry: 2000\n\n"
        while True:
            now = loop.time()
            if not session.ended and now - last_check >= settings.recheck:
                last_check = now
                if await console.gate.still_valid(session) is None:
                    session.ended = True
            if session.ended:
                yield b"event: end\ndata: {}\n\n"
                return
            current = await values(console, signed, view, ids)
            changed = {k: v for k, v in current.items() if sent.get(k) != v}
            if changed:
                sent |= changed
                last_out = now
                yield b"event: update\ndata: " + orjson.dumps(changed) + b"\n\n"
            elif now - last_out >= settings.heartbeat:
                last_out = now
                yield b": heartbeat\n\n"
            await asyncio.sleep(settings.tick)
    finally:
        console.gate.sessions.give_stream(session)
