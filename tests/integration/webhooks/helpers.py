"""Shared steps of the webhook tests: feed items to deliver and a running delivery loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from application import User
from application.app import App
from application.webhooks.delivery_ports import DeliveryQueue
from domain.webhook import RetryPolicy
from infrastructure.bootstrap_workers import webhook_dispatcher
from tests.support.results import ok
from workers.policies.webhook_lanes import LaneSettings
from workers.webhooks.dispatcher import Dispatcher, DispatchSettings

FAST = DispatchSettings(
    timeout=1.0,
    retry=RetryPolicy(first=0.05, longest=0.2, budget=1.0),
    lanes=LaneSettings(fast_pool=8, slow_pool=4, per_host=2, slow_after=0.5),
    interval=0.02,
)


def create_webhook(
    app: App, admin: User, url: str, events: list[str] | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = ok(
        app.write("create-webhook", {"url": url, "events": events or ["*"]}, admin)
    )
    return data


def connect_account(app: App, admin: User, name: str = "desk") -> str:
    payload = {
        "provider": "imap",
        "displayName": "Support desk",
        "address": f"{name}@example.org",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": "127.0.0.1", "port": 1, "security": "none", "username": name},
        "secret": "pw",
    }
    return str(ok(app.write("connect-mail-account", payload, admin))["accountId"])


def ingest(app: App, operator: User, account_id: str, provider_id: str) -> None:
    ok(
        app.write(
            "ingest-message",
            {
                "accountId": account_id,
                "providerMessageId": provider_id,
                "messageIdHeader": f"<{provider_id}@example.org>",
                "references": [],
                "from": [{"name": "Ann", "address": "ann@example.org"}],
                "to": [{"name": "", "address": "desk@example.org"}],
                "cc": [],
                "subject": "Order 42 is late",
                "snippet": "Hello, my order",
                "receivedAt": "2024-05-01T10:00:00+02:00",
                "bodyRef": None,
                "sizeBytes": 1234,
                "folder": "INBOX",
            },
            operator,
        )
    )


def define_fields(app: App, admin: User, count: int, prefix: str = "f") -> None:
    for n in range(count):
        ok(
            app.write(
                "define-tenant-field",
                {"entityName": "contact", "fieldKey": f"{prefix}{n}", "field": {"type": "text"}},
                admin,
            )
        )


@contextmanager
def delivering(
    app: App,
    settings: DispatchSettings = FAST,
    holder: str = "w1",
    follow: bool = True,
    deliveries: DeliveryQueue | None = None,
    allow_private: bool = True,
) -> Iterator[Dispatcher]:
    """A delivery loop (and a projection follower, so new writes reach the feed); the
    receivers of the tests are on loopback, so private hosts are allowed unless not."""
    dispatcher = webhook_dispatcher(
        app, settings, holder, allow_private=allow_private, deliveries=deliveries
    )
    stop = threading.Event()
    threads = [threading.Thread(target=dispatcher.run, args=(stop,), daemon=True)]
    if follow:
        threads.append(threading.Thread(target=_follow, args=(app, stop), daemon=True))
    for thread in threads:
        thread.start()
    try:
        yield dispatcher
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)


def _follow(app: App, stop: threading.Event) -> None:
    while not stop.is_set():
        app.projections.catch_up()
        stop.wait(0.02)


def eventually(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def deliveries(
    app: App, admin: User, webhook_id: str, state: str | None = None
) -> list[dict[str, Any]]:
    payload: dict[str, Any] = {"webhookId": webhook_id, "limit": 1000}
    if state is not None:
        payload["state"] = state
    rows: list[dict[str, Any]] = ok(app.query("list-webhook-deliveries", payload, admin))[
        "deliveries"
    ]
    return rows
