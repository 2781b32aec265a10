"""The ASGI app: ``POST /v1/commands/{handler}`` and ``POST /v1/queries/{query}`` for every
use case, authenticated by API key, rate-limited per key, errors as problem+json.

The API adds no business rules: it authenticates, bounds the request, and hands the
parsed body to ``App.write`` / ``App.query``, whose ``Result`` it answers with. The
OpenAPI document is derived from the use cases' own payload models.

Bounds on what a client sends: a body over ``max_body_bytes`` is refused while it is
read (413), JSON that is not one object is 400, and an ``Authorization`` header that is
not a well-formed key is 401 without a database read.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse

from application.api_keys import keys
from application.api_keys.authenticate import authenticate
from application.app import App
from application.handlers import QUERIES, WRITES, UseCase
from application.mail.get_attachment import Download, open_attachment, open_raw
from application.result import Error, Result
from application.users import User
from infrastructure.http import openapi, problems
from infrastructure.http.rate_limit import Limiter, RateLimiter

log = logging.getLogger("tidings.http")

MAX_BODY_BYTES = 1024 * 1024 + 4096  # the app's payload cap, plus room for whitespace
MAX_SEQUENCE = 2**53 - 1
MAX_WAIT = 30  # seconds a long poll may hold a request
FEED_POLL = 0.25  # seconds between reads of the feed while a client waits
SSE_KEEPALIVE = 15.0  # seconds of quiet before a comment line keeps proxies from timing out


@dataclass(frozen=True)
class ApiSettings:
    rate_per_second: float = 20.0
    rate_burst: int = 40
    max_body_bytes: int = MAX_BODY_BYTES


class _Refused(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


class _Door:
    """Who is calling and what they sent, each bounded before anything is trusted."""

    def __init__(
        self,
        app: App,
        settings: ApiSettings,
        clock: Callable[[], float],
        limiter: Limiter | None,
    ) -> None:
        self.app = app
        self.max_body = settings.max_body_bytes
        self.limiter = limiter or RateLimiter(settings.rate_per_second, settings.rate_burst)
        self.clock = clock

    async def caller(self, request: Request) -> User:
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        presented = presented.strip()
        parts = keys.split(presented) if scheme.lower() == "bearer" else None
        if parts is None:
            raise _Refused(_unauthorized())
        wait, user = await run_in_threadpool(self._admit, parts[0].hex, presented)
        if wait:
            error = Error("rate_limited", 429, "too many requests", {"retryAfter": wait})
            raise _Refused(problems.problem(error, {"Retry-After": str(int(wait))}))
        if user is None:
            raise _Refused(_unauthorized())
        return user

    def _admit(self, key_id: str, presented: str) -> tuple[float, User | None]:
        """The key's budget first (a shared one is a Redis round trip), then who it is:
        guessing keys costs the same budget as using one."""
        wait = self.limiter.take(key_id, self.clock())
        if wait:
            return wait, None
        return 0.0, authenticate(self.app.ctx.store, presented)

    async def body(self, request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            raise _Refused(_too_large(self.max_body))
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise _Refused(_too_large(self.max_body))
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            return {}
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            reason = str(error)[:200]
            raise _Refused(
                problems.fail("invalid_json", 400, "the body is not valid JSON", reason=reason)
            ) from None


def create_api(
    app: App,
    settings: ApiSettings = ApiSettings(),
    *,
    clock: Callable[[], float] = time.monotonic,
    ready: Callable[[], bool] | None = None,
    limiter: Limiter | None = None,
) -> FastAPI:
    """The API over ``app``; ``limiter`` keeps the per-key budgets (default: this
    process's own buckets, from ``settings``)."""
    registry = CollectorRegistry()
    requests = Counter(
        "tidings_http_requests",
        "HTTP API requests by route kind and status",
        ["kind", "status"],
        registry=registry,
    )
    door = _Door(app, settings, clock, limiter)
    api = FastAPI(title="tidings", version="1", openapi_url=None, docs_url=None, redoc_url=None)

    def route(kind: str, use_case: UseCase, call: Callable[[str, Any, User], Result]) -> None:
        async def endpoint(request: Request) -> Response:
            try:
                user = await door.caller(request)
                payload = await door.body(request)
            except _Refused as refused:
                requests.labels(kind, str(refused.response.status_code)).inc()
                return refused.response
            result = await run_in_threadpool(call, use_case.name, payload, user)
            requests.labels(kind, str(200 if result.error is None else result.error.status)).inc()
            if result.error is not None:
                return problems.problem(result.error)
            return Response(orjson.dumps(result.data), 200, media_type="application/json")

        api.add_api_route(
            f"/v1/{kind}/{use_case.name}", endpoint, methods=["POST"], include_in_schema=False
        )

    for use_case in WRITES.values():
        route("commands", use_case, app.write)
    for use_case in QUERIES.values():
        route("queries", use_case, app.query)
    _feed_routes(api, app, door)
    _download_routes(api, app, door)
    _operational_routes(api, registry, ready or (lambda: True))
    _problem_handlers(api)
    return api


def _feed_routes(api: FastAPI, app: App, door: _Door) -> None:
    async def read(user: User, after: int, limit: int) -> Result:
        return await run_in_threadpool(app.feed.read, user, after, limit)

    @api.get("/v1/events", include_in_schema=False)
    async def events(request: Request) -> Response:
        try:
            user = await door.caller(request)
            after = _int_param(request, "after", 0, (0, MAX_SEQUENCE))
            limit = _int_param(request, "limit", 100, (1, 1000))
            wait = _int_param(request, "wait", 0, (0, MAX_WAIT))
        except _Refused as refused:
            return refused.response
        deadline = time.monotonic() + wait
        while True:
            result = await read(user, after, limit)
            if result.error is not None:
                return problems.problem(result.error)
            assert result.data is not None
            if result.data["items"] or time.monotonic() >= deadline:
                return Response(orjson.dumps(result.data), media_type="application/json")
            await asyncio.sleep(FEED_POLL)

    @api.get("/v1/events/stream", include_in_schema=False)
    async def stream(request: Request) -> Response:
        try:
            user = await door.caller(request)
            resume = request.headers.get("last-event-id")
            after = _int_param(request, "after", 0, (0, MAX_SEQUENCE), given=resume)
        except _Refused as refused:
            return refused.response
        first = await read(user, after, 1)
        if first.error is not None:
            return problems.problem(first.error)
        return StreamingResponse(_sse(request, read, user, after), media_type="text/event-stream")


async def _sse(
    request: Request, read: Callable[[User, int, int], Awaitable[Result]], user: User, after: int
) -> AsyncIterator[bytes]:
    """Items as server-sent events (``id`` = sequence, so a reconnect resumes with
    ``Last-Event-ID``), a comment line while nothing happens, until the client goes."""
    quiet_since = time.monotonic()
    while not await request.is_disconnected():
        result = await read(user, after, 100)
        items = result.data["items"] if result.data else []
        for item in items:
            after = item["sequence"]
            yield (
                f"id: {after}\nevent: {item['type']}\ndata: ".encode()
                + orjson.dumps(item)
                + b"\n\n"
            )
        if items:
            quiet_since = time.monotonic()
            continue
        if time.monotonic() - quiet_since >= SSE_KEEPALIVE:
            quiet_since = time.monotonic()
            yield b": still here\n\n"
        await asyncio.sleep(FEED_POLL)


def _download_routes(api: FastAPI, app: App, door: _Door) -> None:
    """Downloads stream from the sealed blob in chunks (decoded as they are read), so a
    file never sits whole in memory. Every file is sent as an attachment with
    ``nosniff`` and a sandboxing CSP: a message's bytes are never rendered on the API's
    origin. The declared content type travels in ``X-Tidings-Content-Type``."""

    async def send(request: Request, open_: Callable[[User], Download | Result]) -> Response:
        try:
            user = await door.caller(request)
        except _Refused as refused:
            return refused.response
        opened = await run_in_threadpool(open_, user)
        if isinstance(opened, Result):
            assert opened.error is not None
            return problems.problem(opened.error)
        raw = opened.content_type == "message/rfc822"
        headers = {
            "Content-Disposition": _disposition(opened.filename),
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox; default-src 'none'",
            "X-Tidings-Content-Type": opened.content_type.encode("ascii", "replace").decode(),
        }
        if not raw:
            headers["Content-Length"] = str(opened.size)
        media = "message/rfc822" if raw else "application/octet-stream"
        return StreamingResponse(opened.chunks, media_type=media, headers=headers)

    @api.get("/v1/messages/{message_id}/raw", include_in_schema=False)
    async def raw(request: Request, message_id: str) -> Response:
        return await send(request, lambda user: open_raw(app.ctx, user, message_id))

    @api.get("/v1/messages/{message_id}/attachments/{attachment_id}", include_in_schema=False)
    async def attachment(request: Request, message_id: str, attachment_id: str) -> Response:
        return await send(
            request, lambda user: open_attachment(app.ctx, user, message_id, attachment_id)
        )


def _disposition(filename: str) -> str:
    """``attachment`` with an ASCII fallback name and the exact one (RFC 6266, RFC 5987)."""
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
    exact = urllib.parse.quote(filename, safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{exact}"


def _int_param(
    request: Request, name: str, default: int, bounds: tuple[int, int], *, given: str | None = None
) -> int:
    low, high = bounds
    text = request.query_params.get(name, given)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit() and len(text) <= 16) or not low <= int(text) <= high:
        raise _Refused(
            problems.fail(
                "invalid_payload",
                400,
                "the request is invalid",
                errors=[{"path": name, "message": f"an integer from {low} to {high}"}],
            )
        )
    return int(text)


def _operational_routes(
    api: FastAPI, registry: CollectorRegistry, ready: Callable[[], bool]
) -> None:
    document = orjson.dumps(openapi.document(WRITES, QUERIES))

    @api.get("/openapi.json", include_in_schema=False)
    async def openapi_json() -> Response:
        return Response(document, media_type="application/json")

    @api.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return JSONResponse({"ok": True})

    @api.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        try:
            ok = await run_in_threadpool(ready)
        except Exception as error:  # the store is down: not ready, not a crash
            log.warning("http.not_ready error=%s", type(error).__name__)
            ok = False
        return JSONResponse({"ok": ok}, 200 if ok else 503)

    @api.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def _problem_handlers(api: FastAPI) -> None:
    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
        return problems.fail(code, error.status_code, str(error.detail))

    @api.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> Response:
        return problems.fail("invalid_request", 400, "the request is invalid")

    @api.exception_handler(Exception)
    async def crash(request: Request, error: Exception) -> Response:
        log.exception("http.crash path=%s error=%s", request.url.path, type(error).__name__)
        return problems.fail("internal", 500, "internal error")


def _unauthorized() -> Response:
    response = problems.fail("unauthorized", 401, "a valid API key is required")
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _too_large(limit: int) -> Response:
    return problems.fail("payload_too_large", 413, "the body is too large", limitBytes=limit)
