"""The ASGI app: ``POST /v1/commands/{handler}`` and ``POST /v1/queries/{query}`` for every
use case, authenticated by API key, rate-limited per key, errors as problem+json.

The API adds no business rules: it authenticates, bounds the request, and hands the
parsed body to ``App.write`` / ``App.query``, whose ``Result`` it answers with. The
OpenAPI document is derived from the use cases' own payload models.

Bounds on what a client sends and holds (``door``): a body over ``max_body_bytes`` is
refused while it is read (413), one slower than ``body_timeout`` is 408, JSON that is
not one object is 400, an ``Authorization`` header that is not a well-formed key is 401
without a database read; budgets per caller address, in all and per key (429); use
cases that dial out (``DIALS_OUT``) run in a pool of their own, capped per tenant. The
feed's routes are ``feed_routes``; uploads (streamed, sealed) are ``uploads``.
"""

from __future__ import annotations

import logging
import re
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response, StreamingResponse

from application.app import App
from application.handlers import DIALS_OUT, QUERIES, WRITES, UseCase
from application.leases import FleetView
from application.mail.get_attachment import Download, open_attachment, open_raw
from application.result import Result
from application.users import User
from infrastructure.http import openapi, problems
from infrastructure.http.console import headers as console_headers
from infrastructure.http.console import mount_console
from infrastructure.http.door import ApiSettings, Door, Refused
from infrastructure.http.feed_routes import feed_routes
from infrastructure.http.rate_limit import Limiter
from infrastructure.http.uploads import upload_routes

log = logging.getLogger("tidings.http")

# ``X-Tidings-Content-Type``: a sender's declared type, reduced to ``type/subtype``
# tokens (RFC 9110), so no folded or hostile value reaches a response header.
_MEDIA_TYPE = re.compile(r"([A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64})(?=[\s;]|$)")


def create_api(
    app: App,
    settings: ApiSettings | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    ready: Callable[[], bool] | None = None,
    limiter: Limiter | None = None,
    fleet: FleetView | None = None,
) -> FastAPI:
    """The API over ``app``; ``limiter`` keeps the per-key budgets (default: this
    process's own buckets, from ``settings``); ``fleet`` shows the workers on the
    console (None: no fleet registry, one process runs everything)."""
    registry = CollectorRegistry()
    requests = Counter(
        "tidings_http_requests",
        "HTTP API requests by route kind and status",
        ["kind", "status"],
        registry=registry,
    )
    door = Door(app, settings or ApiSettings(), clock, limiter)
    api = FastAPI(title="tidings", version="1", openapi_url=None, docs_url=None, redoc_url=None)

    def route(kind: str, use_case: UseCase, call: Callable[[str, Any, User], Result]) -> None:
        async def endpoint(request: Request) -> Response:
            try:
                user = await door.caller(request)
                payload = await door.body(request)
            except Refused as refused:
                requests.labels(kind, str(refused.response.status_code)).inc()
                return refused.response
            if use_case.name in DIALS_OUT:
                result = await door.dialling(user, call, use_case.name, payload)
            else:
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
    feed_routes(api, app, door)
    _download_routes(api, app, door)
    upload_routes(api, app, door)
    mount_console(api, app, door, fleet=fleet)
    _operational_routes(api, registry, ready or (lambda: True))
    _problem_handlers(api)
    return api


def _download_routes(api: FastAPI, app: App, door: Door) -> None:
    """Downloads stream from the sealed blob in chunks (decoded as they are read), so a
    file never sits whole in memory. Every file is sent as an attachment with
    ``nosniff`` and a sandboxing CSP: a message's bytes are never rendered on the API's
    origin. The declared content type travels in ``X-Tidings-Content-Type``."""

    async def send(request: Request, open_: Callable[[User], Download | Result]) -> Response:
        try:
            user = await door.caller(request)
        except Refused as refused:
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
            "X-Tidings-Content-Type": media_type(opened.content_type),
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
        response = problems.fail("internal", 500, "internal error")
        # A crash is answered outside every middleware: the console's headers go on here.
        if console_headers.applies(request.url.path):
            for name, value in console_headers.HEADERS:
                response.headers[name.decode()] = value.decode()
        return response


def media_type(declared: str) -> str:
    """The ``type/subtype`` a declared content type starts with, lower-cased (whatever
    follows it — parameters, a folded line, junk — is dropped); when it starts with no
    such pair, ``application/octet-stream``."""
    match = _MEDIA_TYPE.match(declared.lstrip(" \t"))
    return match.group(1).lower() if match else "application/octet-stream"
