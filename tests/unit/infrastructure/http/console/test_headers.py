"""The console's headers reach every response under /console and no other path's (the
API's own answers are unchanged)."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI
from starlette.responses import PlainTextResponse, Response

from infrastructure.http.console.headers import CSP, ConsoleHeaders, applies


async def _get(api: FastAPI, *paths: str) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=api, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as client:
        return [await client.get(path) for path in paths]


def test_the_headers_are_added_under_the_console_only() -> None:
    api = FastAPI()

    @api.get("/console/page")
    async def page() -> Response:
        return PlainTextResponse("x", headers={"Cache-Control": "max-age=60"})

    @api.get("/v1/other")
    async def other() -> Response:
        return PlainTextResponse("y")

    api.add_middleware(ConsoleHeaders)
    shown, plain, missing = asyncio.run(_get(api, "/console/page", "/v1/other", "/console/x"))
    assert shown.headers["content-security-policy"] == CSP
    assert shown.headers.get_list("cache-control") == ["no-store"]  # replaced, never doubled
    assert "content-security-policy" not in plain.headers
    assert missing.status_code == 404 and missing.headers["x-content-type-options"] == "nosniff"
    assert applies("/console") and applies("/console/x")
    assert not applies("/consoles") and not applies("/v1/console")
