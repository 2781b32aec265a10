"""A claim's lease is short and renewed while its attempt runs, on both backends: the
holder's renewal moves only its own current claims; an attempt that outlasts many
ttls is never taken by a second loop while its own loop lives; and when a loop stops
renewing (its process is gone), its claims are due again within one ttl."""

from __future__ import annotations

import time
from dataclasses import replace

from application import User
from application.app import App
from application.webhooks.delivery_ports import Lane, NewDelivery
from domain.webhook import DELIVERED
from infrastructure.bootstrap_workers import webhook_dispatcher
from infrastructure.webhooks.deliveries import SqlDeliveryQueue
from infrastructure.webhooks.store import SqlWebhookStore
from tests.integration.webhooks.helpers import (
    FAST,
    create_webhook,
    define_fields,
    deliveries,
    delivering,
    eventually,
)
from tests.support.webhook_receiver import Answer, Receiver

TTL = 3.0


def _queue(app: App) -> SqlDeliveryQueue:
    store = app.ctx.webhooks
    assert isinstance(store, SqlWebhookStore)
    return SqlDeliveryQueue(store.db)


def test_a_renewal_moves_only_the_holders_current_claims(app: App, admin: User) -> None:
    queue = _queue(app)
    webhook_id = str(create_webhook(app, admin, "http://127.0.0.1:9/hook")["webhookId"])
    new = [NewDelivery(n, f"item-{n}", "custom_field.defined", f"k{n}") for n in (1, 2, 3)]
    assert queue.fan_out(webhook_id, 0, 3, new, time.time())
    now = time.time()
    mine = queue.claim("w1", now, TTL, [Lane(2)])[0]
    (theirs,) = queue.claim("w2", now, TTL, [Lane(5)])[0]
    assert len(mine) == 2
    stale = replace(mine[1], attempt=mine[1].attempt + 1)  # not the attempt it holds
    assert queue.renew("w1", [mine[0], stale, theirs], now + 60) == 1
    assert queue.renew("w1", [], now + 60) == 0
    later = now + TTL + 1  # every first lease has lapsed, the renewed one has not
    taken = {c.delivery.delivery_id for c in queue.claim("w3", later, TTL, [Lane(5)])[0]}
    assert taken == {mine[1].delivery.delivery_id, theirs.delivery.delivery_id}


def test_an_attempt_longer_than_many_ttls_is_not_taken_by_another_loop(
    app: App, admin: User
) -> None:
    receiver = Receiver(lambda _: Answer(delay=3 * TTL))
    hook = create_webhook(app, admin, receiver.url)
    patient = replace(FAST, timeout=4 * TTL, lease_ttl=TTL)
    with delivering(app, patient, holder="w1"), delivering(app, patient, holder="w2"):
        define_fields(app, admin, 1)
        receiver.wait_for(1)
        eventually(
            lambda: [r["state"] for r in deliveries(app, admin, hook["webhookId"])] == [DELIVERED],
            timeout=6 * TTL,
        )
    assert len(receiver.received) == 1 and receiver.max_in_flight_per_event == 1


def test_a_loop_that_stops_renewing_leaves_its_claims_due_within_one_ttl(
    app: App, admin: User
) -> None:
    queue = _queue(app)
    receiver = Receiver()
    hook = create_webhook(app, admin, receiver.url)
    define_fields(app, admin, 3)
    app.projections.catch_up()
    short = replace(FAST, lease_ttl=TTL)
    assert webhook_dispatcher(app, short, "fan-out", allow_private=True).fan_out() == 3
    # A process that claimed the head of their order and died: its lease is never renewed.
    (_dead_head,) = queue.claim("dead", time.time(), TTL, [Lane(10)])[0]
    died = time.monotonic()
    with delivering(app, short, holder="heir"):
        eventually(
            lambda: (
                [r["state"] for r in deliveries(app, admin, hook["webhookId"])] == [DELIVERED] * 3
            ),
            timeout=4 * TTL,
        )
    assert time.monotonic() - died <= TTL + 2.0
    assert [r["attempts"] for r in deliveries(app, admin, hook["webhookId"])] == [2, 1, 1]
