"""The delivery store's batched claims and outcomes, on both backends: concurrent
claimers (each with its own connections, as processes have) never lease one delivery
twice nor an order's next delivery before its head is finished; the head of an order
follows redelivery; a table from before the head flag gains it with the right heads;
a claim leaves out the endpoints (tenant and destination) and tenants its lanes exclude
and what its quota refuses, and takes turns by endpoint; the destination follows the
URL, and a webhooks table from before it gains it; and in the loop, a hung attempt
never holds the outcomes of the batch it was claimed with, and a stopping loop records
the attempts still in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from application import User
from application.app import App
from application.webhooks.delivery_ports import Claimed, Endpoint, Finished, Lane, NewDelivery
from domain.webhook import DEAD, DELIVERED, PENDING
from infrastructure.bootstrap_workers import webhook_dispatcher
from infrastructure.webhooks.deliveries import SqlDeliveryQueue
from infrastructure.webhooks.store import SqlWebhookStore as Store
from infrastructure.webhooks.tables import DELIVERIES, WEBHOOK_COLUMNS, WEBHOOKS
from tests.integration.webhooks.helpers import (
    FAST,
    create_webhook,
    define_fields,
    deliveries,
    delivering,
    eventually,
)
from tests.support.results import ok
from tests.support.webhook_receiver import Answer, Receiver
from workers.policies.webhook_lanes import LanePolicy, LaneSettings

LEASE = 60.0
SILENT = "http://127.0.0.1:9"  # the discard port: never called here

_OLD_COLUMNS = (
    "delivery_id, webhook_id, tenant_id, sequence, item_id, item_type, order_key, state,"
    " attempts, created_at, next_at, first_at, last_status, last_error, delivered_at,"
    " lease_holder, lease_until"
)
_BEFORE_HEADS = (
    f"CREATE TABLE {DELIVERIES} (delivery_id TEXT PRIMARY KEY,"
    " webhook_id TEXT NOT NULL, tenant_id TEXT NOT NULL, sequence BIGINT NOT NULL,"
    " item_id TEXT NOT NULL, item_type TEXT NOT NULL, order_key TEXT NOT NULL,"
    " state TEXT NOT NULL, attempts INTEGER NOT NULL, created_at DOUBLE PRECISION"
    " NOT NULL, next_at DOUBLE PRECISION NOT NULL, first_at DOUBLE PRECISION,"
    " last_status INTEGER, last_error TEXT, delivered_at DOUBLE PRECISION,"
    " lease_holder TEXT, lease_until DOUBLE PRECISION,"
    " UNIQUE (webhook_id, sequence))"
)


def _store(app: App) -> Store:
    store = app.ctx.webhooks
    assert isinstance(store, Store)
    return store


def _webhook_with(app: App, admin: User, orders: dict[str, int]) -> str:
    """A webhook at ``SILENT`` (its receiver is never called here) with ``orders[key]``
    deliveries per order key, sequences interleaved across the keys."""
    webhook_id = str(create_webhook(app, admin, f"{SILENT}/hook")["webhookId"])
    new, sequence = [], 0
    for n in range(max(orders.values())):
        for key, count in orders.items():
            if n < count:
                sequence += 1
                new.append(NewDelivery(sequence, f"item-{sequence}", "custom_field.defined", key))
    assert SqlDeliveryQueue(_store(app).db).fan_out(webhook_id, 0, sequence, new, time.time())
    return webhook_id


def _delivered(claimed: Claimed, state: str = DELIVERED) -> Finished:
    now = time.time()
    return Finished(claimed, state, now, 200 if state == DELIVERED else 500, None, now)


class OrderWatch:
    """What the claimers took, checked as they take it: no delivery twice, none while
    another of its order is in flight, none before an earlier one of its order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}  # order key -> sequence being attempted
        self.last: dict[str, int] = {}  # order key -> last finished sequence
        self.claimed_by: dict[str, str] = {}
        self.problems: list[str] = []

    def leased(self, holder: str, batch: list[Claimed]) -> None:
        with self.lock:
            for c in batch:
                key, seq = c.delivery.order_key, c.delivery.sequence
                if c.delivery.delivery_id in self.claimed_by:
                    self.problems.append(f"{seq} leased twice")
                self.claimed_by[c.delivery.delivery_id] = holder
                if key in self.in_flight:
                    self.problems.append(f"{seq} leased while {self.in_flight[key]} was out")
                if seq <= self.last.get(key, 0):
                    self.problems.append(f"{seq} leased after {self.last[key]}")
                self.in_flight[key] = seq

    def finished(self, batch: list[Claimed]) -> None:
        with self.lock:
            for c in batch:
                del self.in_flight[c.delivery.order_key]
                self.last[c.delivery.order_key] = c.delivery.sequence


def test_concurrent_claimers_lease_each_delivery_once_and_only_heads_in_order(
    make_app: Callable[..., App], admin: User
) -> None:
    apps = [make_app(), make_app()]
    orders = {"": 6, "acc-a": 5, "acc-b": 4}
    webhook_id = _webhook_with(apps[0], admin, orders)
    watch = OrderWatch()
    start = threading.Barrier(4)

    def work(app: App, holder: str) -> None:
        store, idle = _store(app), 0
        queue = SqlDeliveryQueue(store.db)
        start.wait()
        while idle < 20:
            (batch,) = queue.claim(holder, time.time(), LEASE, [Lane(1)])
            if not batch:
                idle += 1
                time.sleep(0.01)
                continue
            idle = 0
            watch.leased(holder, batch)
            time.sleep(0.005)
            watch.finished(batch)  # before the outcome is written: the next may follow
            assert queue.finish(holder, [_delivered(c) for c in batch]) == [True] * len(batch)

    threads = [
        threading.Thread(target=work, args=(app, f"w{n}-{i}"))
        for n, app in enumerate(apps)
        for i in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert watch.problems == []
    assert len(watch.claimed_by) == sum(orders.values())
    assert len(set(watch.claimed_by.values())) > 1  # the work was shared
    rows = deliveries(apps[0], admin, webhook_id, DELIVERED)
    assert len(rows) == sum(orders.values()) and {r["attempts"] for r in rows} == {1}


def test_a_lost_lease_records_nothing_and_keeps_the_order_waiting(app: App, admin: User) -> None:
    store = _store(app)
    queue = SqlDeliveryQueue(store.db)
    webhook_id = _webhook_with(app, admin, {"": 2})
    (first,) = queue.claim("w1", time.time(), 0.0, [Lane(5)])[0]  # a lease that lapses
    (again,) = queue.claim("w2", time.time() + 0.01, LEASE, [Lane(5)])[0]
    assert again.delivery.delivery_id == first.delivery.delivery_id and again.attempt == 2
    assert queue.finish("w1", [_delivered(first)]) == [False]  # w1 lost it
    assert queue.claim("w3", time.time(), LEASE, [Lane(5)]) == [[]]  # still w2's
    assert queue.finish("w2", [_delivered(again)]) == [True]
    (second,) = queue.claim("w3", time.time(), LEASE, [Lane(5)])[0]
    assert second.delivery.sequence == 2
    assert [r["attempts"] for r in deliveries(app, admin, webhook_id, DELIVERED)] == [2]


def test_a_redelivered_item_is_its_orders_head_again(app: App, admin: User) -> None:
    store = _store(app)
    queue = SqlDeliveryQueue(store.db)
    _webhook_with(app, admin, {"": 3})
    (first,) = queue.claim("w1", time.time(), LEASE, [Lane(5)])[0]
    assert queue.finish("w1", [_delivered(first, DEAD)]) == [True]
    (second,) = queue.claim("w1", time.time(), LEASE, [Lane(5)])[0]
    assert second.delivery.sequence == 2
    assert queue.finish("w1", [replace(_delivered(second), state=PENDING)]) == [True]  # a retry
    assert store.redeliver(admin.tenant_id, first.delivery.delivery_id, time.time()) is not None
    order = []
    while batch := queue.claim("w1", time.time() + 1, LEASE, [Lane(5)])[0]:
        (one,) = batch
        order.append(one.delivery.sequence)
        assert queue.finish("w1", [_delivered(one)]) == [True]
    assert order == [1, 2, 3]


def test_a_table_from_before_the_head_flag_gains_it_with_its_heads(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app()
    webhook_id = _webhook_with(app, admin, {"": 3, "acc-a": 2})
    store = _store(app)
    queue = SqlDeliveryQueue(store.db)
    with store.db.transaction() as cur:  # the table as it was: no head column
        cur.execute(f"ALTER TABLE {DELIVERIES} RENAME TO old_deliveries")
        cur.execute(f"DROP INDEX {DELIVERIES}_due")
        cur.execute(f"DROP INDEX {DELIVERIES}_order")
        cur.execute(f"DROP INDEX {DELIVERIES}_heads")
        cur.execute(_BEFORE_HEADS)
        cur.execute(f"INSERT INTO {DELIVERIES} SELECT {_OLD_COLUMNS} FROM old_deliveries")
        cur.execute("DROP TABLE old_deliveries")
    store.setup()
    heads = queue.claim("w1", time.time(), LEASE, [Lane(10)])[0]
    assert sorted((c.delivery.order_key, c.delivery.sequence) for c in heads) == [
        ("", 1),
        ("acc-a", 2),
    ]
    assert len(deliveries(app, admin, webhook_id, PENDING)) == 5


def test_a_hung_attempt_does_not_hold_the_outcomes_of_its_batch(
    app: App, admin: User, tenant: str
) -> None:
    hung = Receiver(lambda _: Answer(delay=30))
    healthy = Receiver()
    others = [User(id=f"admin-{n}", tenant_id=f"{tenant}-{n}", roles=admin.roles) for n in range(3)]
    create_webhook(app, admin, hung.url)
    hooks = [create_webhook(app, other, healthy.url) for other in others]
    define_fields(app, admin, 1)
    for other in others:
        define_fields(app, other, 1)
    app.projections.catch_up()
    store = _store(app)
    queue = SqlDeliveryQueue(store.db)
    webhook_dispatcher(
        app, FAST, "fan-out", allow_private=True, deliveries=queue
    ).fan_out()  # all due at once
    batches: list[list[str]] = []
    claim = queue.claim

    def watched(*args: Any, **kwargs: Any) -> list[list[Claimed]]:
        lanes = claim(*args, **kwargs)
        batches.append([c.delivery.tenant_id for lane in lanes for c in lane])
        return lanes

    queue.claim = watched  # type: ignore[method-assign]
    started = time.monotonic()
    with delivering(app, replace(FAST, timeout=8.0), follow=False, deliveries=queue):

        def all_recorded() -> bool:
            return all(
                len(deliveries(app, other, hook["webhookId"], DELIVERED)) == 1
                for other, hook in zip(others, hooks, strict=True)
            )

        eventually(all_recorded, timeout=6)
        recorded = time.monotonic() - started
        assert len(hung.received) == 1 and hung.max_in_flight_per_event == 1
    assert sorted(next(b for b in batches if b)) == sorted([tenant, *(o.tenant_id for o in others)])
    assert recorded < 6  # well before the hung attempt's 8 s deadline


def test_a_stopping_loop_records_the_attempts_still_in_flight(app: App, admin: User) -> None:
    receiver = Receiver(lambda _: Answer(delay=0.5))  # within FAST's 1 s deadline
    hook = create_webhook(app, admin, receiver.url)
    define_fields(app, admin, 1)
    with delivering(app):
        receiver.wait_for(1)  # the attempt is under way; the loop is told to stop now
    rows = deliveries(app, admin, hook["webhookId"])
    assert [(r["state"], r["attempts"]) for r in rows] == [(DELIVERED, 1)]


def test_a_lane_with_turns_serves_the_endpoint_waiting_longest(
    app: App, admin: User, tenant: str
) -> None:
    store = _store(app)
    queue = SqlDeliveryQueue(store.db)
    early = _webhook_with(app, admin, {"": 3})  # fanned out first: its heads are older
    time.sleep(0.01)
    other = User(id="admin-o", tenant_id=f"{tenant}-o", roles=admin.roles)
    late = _webhook_with(app, other, {"": 1})
    endpoints = {Endpoint(tenant, SILENT), Endpoint(other.tenant_id, SILENT)}
    (oldest_first,) = queue.claim("w1", time.time(), 0.0, [Lane(1, only=endpoints)])
    assert [c.delivery.webhook_id for c in oldest_first] == [early]
    turns = {Endpoint(tenant, SILENT): time.time()}  # it just had its turn
    (taking_turns,) = queue.claim(
        "w1", time.time() + 0.01, LEASE, [Lane(1, only=endpoints, turns=turns)]
    )
    assert [c.delivery.webhook_id for c in taking_turns] == [late]


def test_a_claim_leaves_out_excluded_endpoints_and_tenants_and_what_its_quota_refuses(
    app: App, admin: User, tenant: str
) -> None:
    queue = SqlDeliveryQueue(_store(app).db)
    other = User(id="admin-o", tenant_id=f"{tenant}-o", roles=admin.roles)
    mine = [_webhook_with(app, admin, {"": 1}) for _ in range(3)]  # one endpoint
    theirs = _webhook_with(app, other, {"": 1})
    now = time.time()
    (none_of_mine,) = queue.claim("w1", now, 0.0, [Lane(9, exclude={Endpoint(tenant, SILENT)})])
    assert [c.delivery.webhook_id for c in none_of_mine] == [theirs]
    (none_of_theirs,) = queue.claim(
        "w1", now + 1, 0.0, [Lane(9, exclude_tenants={other.tenant_id})]
    )
    assert sorted(c.delivery.webhook_id for c in none_of_theirs) == sorted(mine)
    plan = LanePolicy(LaneSettings(per_host=2)).plan()
    assert plan is not None
    lanes = [Lane(9), Lane(9, only={Endpoint(tenant, SILENT)})]
    fast, slow = queue.claim("w1", now + 2, LEASE, lanes, plan.quota)
    assert len([c for c in fast if c.delivery.tenant_id == tenant]) == 2  # its host's cap
    assert [c.delivery.webhook_id for c in fast if c.delivery.tenant_id != tenant] == [theirs]
    assert {c.endpoint for c in fast} == {
        Endpoint(tenant, SILENT),
        Endpoint(other.tenant_id, SILENT),
    }
    assert slow == []  # the endpoint's cap counts both lanes


def test_the_destination_follows_the_url_and_an_old_table_gains_it(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app()
    store = _store(app)
    queue = SqlDeliveryQueue(store.db)
    moved = _webhook_with(app, admin, {"": 1})
    ok(app.write("update-webhook", {"webhookId": moved, "url": "https://Example.COM./x"}, admin))
    with store.db.transaction() as cur:  # the table as it was: no destination column
        cur.execute(f"ALTER TABLE {WEBHOOKS} RENAME TO old_webhooks")
        cur.execute(f"DROP INDEX IF EXISTS {WEBHOOKS}_tenant")
        cur.execute(
            f"CREATE TABLE {WEBHOOKS} (webhook_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL,"
            " url TEXT NOT NULL, events TEXT NOT NULL, description TEXT NOT NULL,"
            " secret TEXT NOT NULL, created_at TEXT NOT NULL, enabled INTEGER NOT NULL,"
            " cursor BIGINT NOT NULL)"
        )
        cur.execute(f"INSERT INTO {WEBHOOKS} SELECT {WEBHOOK_COLUMNS} FROM old_webhooks")
        cur.execute("DROP TABLE old_webhooks")
    store.setup()
    kept = _webhook_with(app, admin, {"": 1})  # added after: its destination from its URL
    claimed = queue.claim("w1", time.time(), LEASE, [Lane(9)])[0]
    assert {c.delivery.webhook_id: c.destination for c in claimed} == {
        moved: "https://example.com:443",
        kept: SILENT,
    }
