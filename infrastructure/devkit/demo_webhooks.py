"""The demo's webhook steps: a loopback receiver subscribed to ``message.received``,
the next mail delivered to it signed, and the feed read over HTTP with an API key.

The receiver, the delivery loop and the HTTP server run in this process, on
127.0.0.1 with ports the system picks; all stop with the demo.
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import orjson
import uvicorn

from application.webhooks.signature import SignatureError, verify_signature
from infrastructure.bootstrap_workers import build_webhook_dispatcher
from infrastructure.cli.runtime import CliError
from infrastructure.http.api import create_api
from infrastructure.http.door import ApiSettings
from infrastructure.runtime.settings import Settings

MAX_BODY = 1024 * 1024


class WebhookDemo:
    def __init__(self, demo: Any, settings: Settings) -> None:
        self.demo = demo
        self.settings = settings
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.arrived = threading.Event()
        self.secret = ""
        self._stop = threading.Event()
        self._receiver: ThreadingHTTPServer | None = None

    def close(self) -> None:
        self._stop.set()
        if self._receiver is not None:
            self._receiver.shutdown()
            self._receiver.server_close()

    def subscribe(self) -> None:
        demo = self.demo
        demo.step(
            "Subscribe a webhook",
            "A receiver on 127.0.0.1 subscribes to message.received; the delivery loop "
            "(in `tidings worker`, here in this process) will POST it each new mail, signed.",
        )
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = min(int(self.headers.get("Content-Length", "0")), MAX_BODY)
                owner.received.append((dict(self.headers.items()), self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()
                owner.arrived.set()

        self._receiver = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._receiver.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{self._receiver.server_address[1]}/tidings"
        created = demo.write("create-webhook", {"url": url, "events": ["message.received"]})
        self.secret = created["secret"]
        demo.console.print(
            f"  [green]✓[/] create-webhook {url} → webhookId {created['webhookId'][:8]}…, "
            "secret shown once"
        )
        dispatcher = build_webhook_dispatcher(demo.app, self.settings, "demo-webhooks")
        threading.Thread(target=dispatcher.run, args=(self._stop,), daemon=True).start()
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        while not self._stop.is_set():
            self.demo.app.projections.catch_up()
            self._stop.wait(0.1)

    def delivered(self) -> None:
        demo = self.demo
        demo.step(
            "The webhook receives the new mail, and the feed over HTTP",
            "The receiver checks Tidings-Signature (HMAC-SHA256 of 't.body'); then "
            "`tidings serve`'s GET /v1/events reads the same feed with an API key.",
        )
        if not self.arrived.wait(30):
            raise CliError("the webhook was not delivered")
        headers, body = self.received[0]
        try:
            verify_signature(self.secret, headers.get("Tidings-Signature", ""), body)
        except SignatureError as bad:
            raise CliError(f"the webhook signature did not verify: {bad}") from None
        item = orjson.loads(body)
        demo.console.print(
            f"  [green]✓[/] POST {item['type']} #{item['sequence']} "
            f'"{item["data"].get("subject")}" · attempt '
            f"{headers.get('Tidings-Delivery-Attempt')} · signature valid",
            highlight=False,
        )
        key = demo.write("create-api-key", {"name": "demo", "roles": ["TenantAdmin"]})["key"]
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(
                create_api(demo.app, ApiSettings()),
                host="127.0.0.1",
                port=port,
                log_level="warning",
                lifespan="off",
            )
        )
        threading.Thread(target=server.run, daemon=True).start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline:
                raise CliError("the HTTP server did not start")
            time.sleep(0.05)
        try:
            page = httpx.get(
                f"http://127.0.0.1:{port}/v1/events",
                params={"after": 0, "limit": 1000},
                headers={"Authorization": f"Bearer {key}"},
                timeout=20,
            ).json()
        finally:
            server.should_exit = True
        kinds: dict[str, int] = {}
        for entry in page["items"]:
            kinds[entry["type"]] = kinds.get(entry["type"], 0) + 1
        summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        demo.console.print(
            f"  GET /v1/events → {len(page['items'])} items ({summary}), nextAfter "
            f"{page['nextAfter']}",
            highlight=False,
        )
