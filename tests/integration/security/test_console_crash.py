"""A crash under /console is answered outside every middleware: its 500 still carries
the console's headers (both backends)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
from starlette.responses import Response

from application.app import App
from infrastructure.http.api import create_api
from infrastructure.http.console.headers import CSP


def test_a_crash_under_the_console_carries_its_headers(make_app: Callable[..., App]) -> None:
    api = create_api(make_app())

    @api.get("/console/boom")
    async def boom() -> Response:
        raise RuntimeError("a bug")

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=api, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://c.test") as client:
            return await client.get("/console/boom")

    crashed = asyncio.run(get())
    assert crashed.status_code == 500
    assert crashed.headers["content-security-policy"] == CSP
    assert crashed.headers["cache-control"] == "no-store"
