"""Two delivery loops on one database (each with its own app and connections, as two
processes have), on both backends: every delivery is attempted by one of them at a
time, and a healthy endpoint gets each item once, in order per account."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

from application import User
from application.app import App
from tests.integration.webhooks.helpers import (
    connect_account,
    create_webhook,
    define_fields,
    deliveries,
    delivering,
    eventually,
    ingest,
)
from tests.support.webhook_receiver import Answer, Received, Receiver


def test_two_loops_never_attempt_one_delivery_at_once_nor_deliver_it_twice(
    make_app: Callable[..., App], admin: User, operator: User
) -> None:
    first, second = make_app(), make_app()
    healthy = Receiver()
    seen: set[str] = set()
    lock = threading.Lock()

    def fail_first_attempt(got: Received) -> Answer:
        with lock:
            event = got.headers["Tidings-Event-Id"]
            if event in seen:
                return Answer(delay=0.02)
            seen.add(event)
        return Answer(status=503, delay=0.02)

    flaky = Receiver(fail_first_attempt)
    good = create_webhook(first, admin, healthy.url, ["message.received", "custom_field."])
    retried = create_webhook(first, admin, flaky.url, ["message.received"])
    accounts = [connect_account(first, admin, f"a{n}") for n in range(3)]
    with delivering(first, holder="w1"), delivering(second, holder="w2", follow=False):
        for n in range(8):
            for account in accounts:
                ingest(first if n % 2 else second, operator, account, f"{account}-{n}")
        define_fields(second, admin, 4)
        healthy.wait_for(28)
        eventually(lambda: len(deliveries(first, admin, retried["webhookId"], "delivered")) == 24)
        eventually(lambda: len(deliveries(first, admin, good["webhookId"], "delivered")) == 28)
    assert healthy.max_in_flight_per_event == 1 and flaky.max_in_flight_per_event == 1
    ids = [r.headers["Tidings-Event-Id"] for r in healthy.received]
    assert len(ids) == len(set(ids)) == 28  # each item once to the healthy endpoint
    assert {r.headers["Tidings-Delivery-Attempt"] for r in healthy.received} == {"1"}
    assert len(flaky.received) == 48  # one failed and one good attempt each
    for receiver in (healthy, flaky):
        by_order: dict[str, list[int]] = defaultdict(list)
        for r in receiver.received:
            if r.headers["Tidings-Delivery-Attempt"] == "1" and receiver is flaky:
                continue
            item = r.item
            by_order[item["data"].get("accountId", "")].append(item["sequence"])
        for sequences in by_order.values():
            assert sequences == sorted(sequences)
