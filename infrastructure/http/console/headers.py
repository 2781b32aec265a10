"""The console's response headers, on every response under ``/console`` whatever route,
error or redirect produced it (an ASGI wrapper, so a streamed response gets them too).

The policy allows only the console's own files: no inline script or style (the
templates carry none), nothing framing the console, forms posting only to it; data:
images for the server-drawn charts. Nothing is cached: every page holds a tenant's
state and a session's CSRF token.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PREFIX = "/console"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
]
_NAMES = {name for name, _ in HEADERS}


def applies(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


class ConsoleHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not applies(scope.get("path", "")):
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _NAMES]
                message = {**message, "headers": kept + HEADERS}
            await send(message)

        await self.app(scope, receive, send_secured)
