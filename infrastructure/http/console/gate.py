"""Who is signed in to the console, and what a form may carry.

Every request with a session cookie authenticates the session's key again (a store
read, as the API does for every request), so a key revoked, or a tenant shredded,
ends all the sessions made with it at their next request or stream check. Sign-ins
spend the API's budgets — every caller's, the client address's, then the presented
key's — so guessing keys through the form costs what guessing them through the API
does. A form is read up to ``MAX_FORM_BYTES`` within ``FORM_TIMEOUT`` and must carry
its session's CSRF token; anything else is 403 before any handler runs.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from application.api_keys import keys
from application.api_keys.authenticate import authenticate
from application.app import App
from application.users import User
from infrastructure.http.console.sessions import Session, Sessions
from infrastructure.http.door import EVERYONE, Door

COOKIE = "tidings_console"
MAX_FORM_BYTES = 16 * 1024
FORM_TIMEOUT = 10.0


class FormRefused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Signed:
    session: Session
    user: User


@dataclass(frozen=True)
class SignInRefused:
    status: int
    reason: str
    retry_after: float = 0.0


class Gate:
    def __init__(
        self, app: App, door: Door, sessions: Sessions, clock: Callable[[], float]
    ) -> None:
        self.app = app
        self.door = door
        self.sessions = sessions
        self.clock = clock

    async def signed_in(self, request: Request) -> Signed | None:
        session = self.sessions.get(request.cookies.get(COOKIE), self.clock())
        if session is None:
            return None
        user = await self.still_valid(session)
        return None if user is None else Signed(session, user)

    async def still_valid(self, session: Session) -> User | None:
        """The session's user, or None after ending every session of its key."""
        user = await run_in_threadpool(authenticate, self.app.ctx, session.presented)
        if user is None:
            self.sessions.end_key(session.key_id)
        return user

    async def sign_in(self, request: Request, presented: str) -> Session | SignInRefused:
        now = self.clock()
        address = request.client.host if request.client else "unknown"
        wait = self.door.everyone.take(EVERYONE, now) or self.door.addresses.take(address, now)
        if wait:
            return SignInRefused(429, "Too many sign-ins; try again shortly.", wait)
        parts = keys.split(presented)
        if parts is None:
            return SignInRefused(401, "That is not a valid API key.")
        wait, user = await run_in_threadpool(self.door.admit, parts[0].hex, presented)
        if wait:
            return SignInRefused(429, "Too many sign-ins with this key; try again shortly.", wait)
        if user is None:
            return SignInRefused(401, "That is not a valid API key.")
        return self.sessions.open(parts[0].hex, user.tenant_id, presented, now)

    async def form(self, request: Request, session: Session | None) -> dict[str, str]:
        """The form's fields (the last of each name), after its CSRF token is checked
        against ``session`` (sign-in has none yet: its form is checked by the key)."""
        fields = await read_form(request)
        if session is not None and not session.csrf_matches(fields.get("csrf")):
            raise FormRefused(403, "The form is stale or forged; reload the page.")
        return fields


async def read_form(request: Request) -> dict[str, str]:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not media and request.headers.get("content-length", "0") == "0":
        return {}  # an empty POST: no fields, so no CSRF token either (403)
    if media != "application/x-www-form-urlencoded":
        raise FormRefused(415, "Forms are sent URL-encoded.")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_FORM_BYTES):
        raise FormRefused(413, "The form is too large.")
    chunks, size = [], 0
    try:
        async with asyncio.timeout(FORM_TIMEOUT):
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_FORM_BYTES:
                    raise FormRefused(413, "The form is too large.")
                chunks.append(chunk)
    except TimeoutError:
        raise FormRefused(408, "The form took too long to arrive.") from None
    try:
        text = b"".join(chunks).decode("ascii")
        pairs = urllib.parse.parse_qsl(
            text, keep_blank_values=True, strict_parsing=False, max_num_fields=50
        )
    except (UnicodeDecodeError, ValueError):
        raise FormRefused(400, "The form cannot be read.") from None
    return dict(pairs)
