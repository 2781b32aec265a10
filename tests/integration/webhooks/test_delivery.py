"""Webhook delivery against real receivers on loopback, on both backends: signed
posts in order per account, nothing lost across an outage, dead after the retry budget
and redeliverable, a hung endpoint timed out without delaying another, hostile
answers (an endless body, a redirect) bounded."""

from __future__ import annotations

import time
from collections import defaultdict

from application import User
from application.app import App
from application.webhooks.signature import verify_signature
from tests.integration.webhooks.helpers import (
    FAST,
    connect_account,
    create_webhook,
    define_fields,
    deliveries,
    delivering,
    eventually,
    ingest,
)
from tests.support.results import ok
from tests.support.webhook_receiver import Answer, Received, Receiver


def test_a_receiver_down_for_a_while_gets_everything_in_order_and_signed(
    app: App, admin: User, operator: User
) -> None:
    receiver = Receiver()
    hook = create_webhook(app, admin, receiver.url, ["message.", "custom_field."])
    accounts = [connect_account(app, admin, f"a{n}") for n in range(2)]
    receiver.stop()  # down
    with delivering(app):
        for n in range(6):
            for account in accounts:
                ingest(app, operator, account, f"{account}-{n}")
        define_fields(app, admin, 3)
        time.sleep(0.5)  # attempts fail meanwhile and back off
        receiver.start()  # back, on the same port
        got = receiver.wait_for(15)
        eventually(lambda: len(deliveries(app, admin, hook["webhookId"], "delivered")) == 15)
    assert deliveries(app, admin, hook["webhookId"], "dead") == []
    firsts: dict[str, Received] = {}
    for r in got:
        verify_signature(hook["secret"], r.headers["Tidings-Signature"], r.body)
        assert r.headers["Tidings-Event-Id"] == r.item["id"]
        firsts.setdefault(r.item["id"], r)
    assert len(firsts) == 15  # nothing lost
    by_order: dict[str, list[int]] = defaultdict(list)
    for r in got:
        item = r.item
        key = item["data"].get("accountId") if item["type"] == "message.received" else ""
        by_order[key].append(item["sequence"])
    for sequences in by_order.values():  # never out of order, never one delivered twice
        assert sequences == sorted(set(sequences))
    assert {r.item["type"] for r in got} == {"message.received", "custom_field.defined"}
    assert any(int(r.headers["Tidings-Delivery-Attempt"]) > 1 for r in got)


def test_a_receiver_failing_forever_ends_dead_and_can_be_redelivered(app: App, admin: User) -> None:
    failing = Receiver(lambda _: Answer(status=500))
    hook = create_webhook(app, admin, failing.url)
    with delivering(app) as dispatcher:
        define_fields(app, admin, 1)
        eventually(lambda: len(deliveries(app, admin, hook["webhookId"], "dead")) == 1)
        registry = dispatcher.metrics.registry
        assert registry.get_sample_value("tidings_webhook_dead_total") == 1
        assert (registry.get_sample_value("tidings_webhook_retried_total") or 0) >= 2
        dead = deliveries(app, admin, hook["webhookId"], "dead")[0]
        assert dead["lastStatus"] == 500 and dead["attempts"] >= 3
        attempts = len(failing.received)
        failing.behaviour = lambda _: Answer(status=204)
        again = ok(app.write("redeliver-webhook", {"deliveryId": dead["deliveryId"]}, admin))
        assert again["state"] == "pending"
        eventually(lambda: len(deliveries(app, admin, hook["webhookId"], "delivered")) == 1)
    assert len(failing.received) == attempts + 1
    assert failing.received[-1].headers["Tidings-Delivery-Attempt"] == "1"


def test_a_hung_endpoint_times_out_while_another_receives_on_time(
    app: App, admin: User, tenant: str
) -> None:
    hung = Receiver(lambda _: Answer(delay=30))
    healthy = Receiver()
    other = User(id="admin-o", tenant_id=tenant + "-o", roles=admin.roles)
    slow_hook = create_webhook(app, admin, hung.url)
    create_webhook(app, other, healthy.url)
    with delivering(app):
        define_fields(app, admin, 3)
        hung.wait_for(1)
        started = time.time()
        define_fields(app, other, 5)
        got = healthy.wait_for(5, timeout=10)
        for r in got:  # each within a fraction of the hung endpoint's timeout
            assert r.at - started < FAST.timeout + 0.5
        eventually(
            lambda: any(
                d["lastError"] == "timeout" for d in deliveries(app, admin, slow_hook["webhookId"])
            ),
            timeout=10,
        )
    assert hung.max_in_flight_per_event == 1


def test_an_endless_response_body_is_cut_off_and_a_redirect_is_not_followed(
    app: App, admin: User, tenant: str
) -> None:
    target = Receiver()
    endless = Receiver(lambda _: Answer(endless_body=True))
    redirect = Receiver(lambda _: Answer(status=302, headers=(("Location", target.url),)))
    other = User(id="admin-o", tenant_id=tenant + "-o", roles=admin.roles)
    big = create_webhook(app, admin, endless.url)
    moved = create_webhook(app, other, redirect.url)
    with delivering(app):
        started = time.monotonic()
        define_fields(app, admin, 1)
        define_fields(app, other, 1)
        eventually(lambda: len(deliveries(app, admin, big["webhookId"], "delivered")) == 1, 10)
        assert time.monotonic() - started < 5  # 4 KB read, not 1 GiB
        eventually(
            lambda: any(d["lastStatus"] == 302 for d in deliveries(app, other, moved["webhookId"])),
            10,
        )
    assert target.received == []


def test_a_private_destination_is_refused_at_delivery_time_too(app: App, admin: User) -> None:
    receiver = Receiver()
    hook = create_webhook(app, admin, receiver.url)  # allowed when created (setting on)
    with delivering(app, allow_private=False):  # then the rule applies
        define_fields(app, admin, 1)
        eventually(
            lambda: any(
                d["lastError"] == "HostNotAllowed"
                for d in deliveries(app, admin, hook["webhookId"])
            )
        )
    assert receiver.received == []
