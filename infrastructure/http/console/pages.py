"""What every console page shares: who is signed in, running a use case as them, and
answering with a page, a redirect or an error page.

Pages run the application's own queries and commands (``App.query`` / ``App.write``)
as the signed-in key's user, so a page shows and does exactly what that key may
through the HTTP API: a handler's 404 for another tenant's account is the console's
404 too. Nothing here reads the database itself.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from application.app import App
from application.leases import FleetView
from application.result import Error, Result
from infrastructure.http.console.gate import Gate, Signed
from infrastructure.http.console.render import Renderer

PAGE_SIZE = 50
MAX_PAGE = 100_000
SIGN_IN = "/console/sign-in"


class Redirect(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


@dataclass(frozen=True)
class Page:
    """One page of a list: its rows and the links around it."""

    items: Sequence[Any]
    number: int
    total: int
    size: int
    base: str
    query: dict[str, str]

    @property
    def first(self) -> int:
        return 0 if not self.total else self.number * self.size + 1

    @property
    def last(self) -> int:
        return min(self.total, (self.number + 1) * self.size)

    @property
    def previous(self) -> int | None:
        return self.number - 1 if self.number > 0 else None

    @property
    def next(self) -> int | None:
        return self.number + 1 if self.last < self.total else None

    def link(self, number: int) -> str:
        kept = {k: v for k, v in self.query.items() if v}
        return f"{self.base}?{urllib.parse.urlencode({**kept, 'page': number})}"


def page_number(raw: str | None) -> int:
    number = int(raw) if raw and raw.isdigit() and len(raw) < 7 else 0
    return min(number, MAX_PAGE)


def paged(rows: Sequence[Any], raw_page: str | None, base: str, query: dict[str, str]) -> Page:
    last_page = max(0, (len(rows) - 1) // PAGE_SIZE)
    number = min(page_number(raw_page), last_page)
    chunk = rows[number * PAGE_SIZE : (number + 1) * PAGE_SIZE]
    return Page(chunk, number, len(rows), PAGE_SIZE, base, query)


class Console:
    def __init__(self, app: App, gate: Gate, renderer: Renderer) -> None:
        self.app = app
        self.gate = gate
        self.renderer = renderer
        self.fleet: FleetView | None = None  # the workers' heartbeats (None: no Redis)

    async def require(self, request: Request) -> Signed:
        signed = await self.gate.signed_in(request)
        if signed is None:
            raise Redirect(RedirectResponse(SIGN_IN, 303))
        return signed

    async def query(self, signed: Signed, name: str, payload: dict[str, Any]) -> Result:
        return await run_in_threadpool(self.app.query, name, payload, signed.user)

    async def write(self, signed: Signed, name: str, payload: dict[str, Any]) -> Result:
        return await run_in_threadpool(self.app.write, name, payload, signed.user)

    async def call(self, work: Callable[[], Any]) -> Any:
        return await run_in_threadpool(work)

    def show(
        self, signed: Signed, template: str, section: str, code: int = 200, **values: Any
    ) -> Response:
        flash = signed.session.flash
        signed.session.flash = None
        return self.renderer.page(
            template, code, signed=signed, section=section, flash=flash, **values
        )

    def failed(self, signed: Signed | None, error: Error | None) -> Response:
        assert error is not None
        titles = {403: "Not allowed", 404: "Not found", 410: "Gone", 503: "Unavailable"}
        return self.renderer.page(
            "error.html",
            error.status,
            signed=signed,
            section="",
            status=error.status,
            title=titles.get(error.status, "That did not work"),
            message=error.message,
        )

    def refused(self, signed: Signed | None, status: int, message: str) -> Response:
        return self.failed(signed, Error("refused", status, message, {}))


def back_to(raw: str | None, default: str) -> str:
    """A redirect target the form named, if it is a console path (never another site)."""
    if raw is None:
        return default
    safe = raw.startswith("/console/") and len(raw) <= 2000
    if safe and "//" not in raw and "\\" not in raw and all(32 < ord(c) < 127 for c in raw):
        return raw
    return default
