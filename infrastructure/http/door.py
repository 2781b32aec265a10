"""Who is calling and what they sent, each bounded before anything is trusted; and
what a caller may hold open at once.

Budgets, in the order they are spent: every caller's together and the client
address's (before any key is looked up, so made-up keys cost a budget too and no
store read past it), then the presented key's. A key is looked up only when all three
have a token left.

Held at once: a tenant runs at most ``dial_out_per_tenant`` requests that dial out
(``DIALS_OUT``: a verify, with its token refresh), in a thread pool of their own
(``dial_out_threads``), so a tenant that points them at a slow server cannot take the
threads that authenticate and answer everyone else; a key holds at most
``streams_per_key`` event streams and long polls, a tenant at most
``uploads_per_tenant`` uploads at once (stored in a pool of ``upload_threads``, each
within ``upload_timeout`` from its first byte to its last). Over any cap: 429.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from application.api_keys import keys
from application.api_keys.authenticate import authenticate
from application.app import App
from application.result import Error, Result
from application.users import User
from infrastructure.http import problems
from infrastructure.http.rate_limit import Limiter, RateLimiter

MAX_BODY_BYTES = 1024 * 1024 + 4096  # the app's payload cap, plus room for whitespace
EVERYONE = "*"


@dataclass(frozen=True)
class ApiSettings:
    rate_per_second: float = 20.0
    rate_burst: int = 40
    address_rate_per_second: float = 50.0
    address_rate_burst: int = 100
    global_rate_per_second: float = 1000.0
    global_rate_burst: int = 2000
    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout: float = 15.0  # seconds to send a request's whole body
    dial_out_threads: int = 16
    dial_out_per_tenant: int = 4
    streams_per_key: int = 8
    upload_timeout: float = 120.0  # seconds for a whole upload to arrive
    uploads_per_tenant: int = 2
    upload_threads: int = 8


class Refused(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


@dataclass(frozen=True)
class Caller:
    user: User
    presented: str  # the key, to check it again while a stream stays open


class Door:
    def __init__(
        self,
        app: App,
        settings: ApiSettings,
        clock: Callable[[], float],
        limiter: Limiter | None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.max_body = settings.max_body_bytes
        self.limiter = limiter or RateLimiter(settings.rate_per_second, settings.rate_burst)
        self.everyone = RateLimiter(settings.global_rate_per_second, settings.global_rate_burst)
        self.addresses = RateLimiter(settings.address_rate_per_second, settings.address_rate_burst)
        self.clock = clock
        self.dial_out = anyio.CapacityLimiter(settings.dial_out_threads)
        self._dialling: Counter[str] = Counter()  # tenant -> dial-outs in flight
        self._streams: Counter[str] = Counter()  # key id -> streams open
        self.upload_pool = anyio.CapacityLimiter(settings.upload_threads)
        self._uploading: Counter[str] = Counter()  # tenant -> uploads in flight
        self._lock = threading.Lock()

    async def caller(self, request: Request) -> User:
        return (await self.identify(request)).user

    async def identify(self, request: Request) -> Caller:
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        presented = presented.strip()
        now = self.clock()
        address = request.client.host if request.client else "unknown"
        wait = self.everyone.take(EVERYONE, now) or self.addresses.take(address, now)
        if wait:
            raise Refused(rate_limited(wait))
        parts = keys.split(presented) if scheme.lower() == "bearer" else None
        if parts is None:
            raise Refused(unauthorized())
        wait, user = await run_in_threadpool(self.admit, parts[0].hex, presented)
        if wait:
            raise Refused(rate_limited(wait))
        if user is None:
            raise Refused(unauthorized())
        return Caller(user, presented)

    def admit(self, key_id: str, presented: str) -> tuple[float, User | None]:
        """The key's budget first (a shared one is a Redis round trip), then who it is:
        guessing keys costs the same budget as using one."""
        wait = self.limiter.take(key_id, self.clock())
        if wait:
            return wait, None
        return 0.0, authenticate(self.app.ctx, presented)

    async def still_valid(self, caller: Caller) -> bool:
        """The key is still active and its tenant not shredded (no budget taken)."""
        return await run_in_threadpool(authenticate, self.app.ctx, caller.presented) is not None

    async def body(self, request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            raise Refused(_too_large(self.max_body))
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.settings.body_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > self.max_body:
                        raise Refused(_too_large(self.max_body))
                    chunks.append(chunk)
        except TimeoutError:
            raise Refused(
                problems.fail("request_timeout", 408, "the body took too long to arrive")
            ) from None
        raw = b"".join(chunks)
        if not raw.strip():
            return {}
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            reason = str(error)[:200]
            raise Refused(
                problems.fail("invalid_json", 400, "the body is not valid JSON", reason=reason)
            ) from None

    async def dialling(
        self, user: User, call: Callable[[str, Any, User], Result], name: str, payload: Any
    ) -> Result:
        """``call`` in the dial-out pool, within the tenant's cap."""
        tenant = user.tenant_id
        with self._lock:
            if self._dialling[tenant] >= self.settings.dial_out_per_tenant:
                return Result.fail(
                    "rate_limited",
                    429,
                    "too many requests that dial out for this tenant",
                    retryAfter=1,
                )
            self._dialling[tenant] += 1
        try:
            return await anyio.to_thread.run_sync(call, name, payload, user, limiter=self.dial_out)
        finally:
            with self._lock:
                self._dialling[tenant] -= 1
                if self._dialling[tenant] <= 0:
                    del self._dialling[tenant]

    @contextmanager
    def upload_slot(self, user: User) -> Iterator[None]:
        """One of the tenant's upload slots while the block runs; 429 when none is left."""
        tenant = user.tenant_id
        with self._lock:
            if self._uploading[tenant] >= self.settings.uploads_per_tenant:
                raise Refused(
                    problems.fail(
                        "too_many_uploads",
                        429,
                        "this tenant streams as many uploads at once as allowed",
                        limit=self.settings.uploads_per_tenant,
                        retryAfter=1,
                    )
                )
            self._uploading[tenant] += 1
        try:
            yield
        finally:
            with self._lock:
                self._uploading[tenant] -= 1
                if self._uploading[tenant] <= 0:
                    del self._uploading[tenant]

    @contextmanager
    def stream_slot(self, user: User) -> Iterator[None]:
        """One of the key's stream slots for as long as the block runs; 429 when none
        is left."""
        with self._lock:
            if self._streams[user.id] >= self.settings.streams_per_key:
                raise Refused(
                    problems.fail(
                        "too_many_streams",
                        429,
                        "this key holds as many event streams as allowed",
                        limit=self.settings.streams_per_key,
                    )
                )
            self._streams[user.id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._streams[user.id] -= 1
                if self._streams[user.id] <= 0:
                    del self._streams[user.id]


def rate_limited(wait: float) -> Response:
    error = Error("rate_limited", 429, "too many requests", {"retryAfter": wait})
    return problems.problem(error, {"Retry-After": str(int(wait))})


def unauthorized() -> Response:
    response = problems.fail("unauthorized", 401, "a valid API key is required")
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _too_large(limit: int) -> Response:
    return problems.fail("payload_too_large", 413, "the body is too large", limitBytes=limit)
