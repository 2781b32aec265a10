"""``GET /v1/events`` (a page, or a long poll with ``wait``) and ``GET
/v1/events/stream`` (server-sent events).

A request that stays open keeps proving its key: every ``RECHECK`` seconds the key is
looked up again, and a key revoked meanwhile (or whose tenant was shredded) ends the
stream or the poll, so nothing reaches it after the revocation but what was already
on its way. Each open one holds one of its key's stream slots (``Door.stream_slot``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager

import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from application.app import App
from application.result import Result
from application.users import User
from infrastructure.http import problems
from infrastructure.http.door import Caller, Door, Refused, unauthorized
from infrastructure.http.params import MAX_SEQUENCE, int_param

MAX_WAIT = 30  # seconds a long poll may hold a request
FEED_POLL = 0.25  # seconds between reads of the feed while a client waits
SSE_KEEPALIVE = 15.0  # seconds of quiet before a comment line keeps proxies from timing out
RECHECK = 2.0  # seconds between look-ups of an open stream's key

Read = Callable[[User, int, int], Awaitable[Result]]


class _Rechecked:
    """Whether the caller's key still holds, looked up at most every ``RECHECK`` s."""

    def __init__(self, door: Door, caller: Caller) -> None:
        self._door, self._caller = door, caller
        self._next = time.monotonic() + RECHECK

    async def holds(self) -> bool:
        if time.monotonic() < self._next:
            return True
        self._next = time.monotonic() + RECHECK
        return await self._door.still_valid(self._caller)


class _SlotStream(StreamingResponse):
    """A stream that gives its key's slot back however it ends (also when the client
    left before the first byte)."""

    def __init__(self, content: AsyncIterator[bytes], slot: AbstractContextManager[None]) -> None:
        super().__init__(content, media_type="text/event-stream")
        self._slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.__exit__(None, None, None)


def feed_routes(api: FastAPI, app: App, door: Door) -> None:
    async def read(user: User, after: int, limit: int) -> Result:
        return await run_in_threadpool(app.feed.read, user, after, limit)

    @api.get("/v1/events", include_in_schema=False)
    async def events(request: Request) -> Response:
        try:
            caller = await door.identify(request)
            after = int_param(request, "after", 0, (0, MAX_SEQUENCE))
            limit = int_param(request, "limit", 100, (1, 1000))
            wait = int_param(request, "wait", 0, (0, MAX_WAIT))
            if not wait:
                return await _page(read, caller.user, after, limit)
            with door.stream_slot(caller.user):
                key = _Rechecked(door, caller)
                return await _long_poll(read, key, caller.user, (after, limit), wait)
        except Refused as refused:
            return refused.response

    @api.get("/v1/events/stream", include_in_schema=False)
    async def stream(request: Request) -> Response:
        try:
            caller = await door.identify(request)
            resume = request.headers.get("last-event-id")
            after = int_param(request, "after", 0, (0, MAX_SEQUENCE), given=resume)
            slot = door.stream_slot(caller.user)
            slot.__enter__()
        except Refused as refused:
            return refused.response
        try:
            first = await read(caller.user, after, 1)
        except BaseException:
            slot.__exit__(None, None, None)
            raise
        if first.error is not None:
            slot.__exit__(None, None, None)
            return problems.problem(first.error)
        items = _sse(request, read, _Rechecked(door, caller), caller.user, after)
        return _SlotStream(items, slot)


async def _page(read: Read, user: User, after: int, limit: int) -> Response:
    result = await read(user, after, limit)
    if result.error is not None:
        return problems.problem(result.error)
    return Response(orjson.dumps(result.data), media_type="application/json")


async def _long_poll(
    read: Read, key: _Rechecked, user: User, page: tuple[int, int], wait: int
) -> Response:
    after, limit = page
    deadline = time.monotonic() + wait
    while True:
        if not await key.holds():
            return unauthorized()
        result = await read(user, after, limit)
        if result.error is not None:
            return problems.problem(result.error)
        assert result.data is not None
        if result.data["items"] or time.monotonic() >= deadline:
            return Response(orjson.dumps(result.data), media_type="application/json")
        await asyncio.sleep(FEED_POLL)


async def _sse(
    request: Request, read: Read, key: _Rechecked, user: User, after: int
) -> AsyncIterator[bytes]:
    """Items as server-sent events (``id`` = sequence, so a reconnect resumes with
    ``Last-Event-ID``), a comment line while nothing happens, until the client goes
    or the key stops holding."""
    quiet_since = time.monotonic()
    while not await request.is_disconnected():
        if not await key.holds():
            yield b"event: revoked\ndata: {}\n\n"
            return
        result = await read(user, after, 100)
        items = result.data["items"] if result.data else []
        for item in _events(items):
            after = item[0]
            yield item[1]
        if items:
            quiet_since = time.monotonic()
            continue
        if time.monotonic() - quiet_since >= SSE_KEEPALIVE:
            quiet_since = time.monotonic()
            yield b": still here\n\n"
        await asyncio.sleep(FEED_POLL)


def _events(items: list[dict[str, object]]) -> Iterator[tuple[int, bytes]]:
    for item in items:
        sequence = item["sequence"]
        assert isinstance(sequence, int)
        frame = f"id: {sequence}\nevent: {item['type']}\ndata: ".encode()
        yield sequence, frame + orjson.dumps(item) + b"\n\n"
