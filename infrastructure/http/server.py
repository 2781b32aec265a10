"""uvicorn, bounded: connections in all, and a deadline on each request's headers.

uvicorn bounds idle keep-alive connections but not a client that sends its headers a
byte at a time: a connection with no request yet (or none since its last response)
would hold a socket for as long as the drip lasts. ``HeaderDeadlineH11`` closes a
connection whose next request's headers are not complete ``header_timeout`` seconds
after it opened (or after its last response ended). The body has its own deadline in
the API (``ApiSettings.body_timeout``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeaderDeadlineH11(H11Protocol):
    header_timeout = 15.0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        waiting_after = self.cycle  # a request parsed after this replaces the cycle
        self._header_timer = self.loop.call_later(
            self.header_timeout, self._headers_late, waiting_after
        )

    def _headers_late(self, waiting_after: object) -> None:
        self._header_timer = None
        if self.cycle is waiting_after and not self.transport.is_closing():
            self.transport.close()


def config(
    app: Any, *, host: str, port: int, max_connections: int, header_timeout: float
) -> uvicorn.Config:
    protocol = type("BoundedH11", (HeaderDeadlineH11,), {"header_timeout": header_timeout})
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        limit_concurrency=max_connections,
        timeout_keep_alive=5,
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
