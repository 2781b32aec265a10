"""The sweeper's runs on both backends: killed mid-batch (before its append commits,
and after) and run again, each expiry is recorded once; two sweepers racing over the
same values, each once; the lease lets one sweeper run at a time."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from application import User
from application.app import App
from application.ports import EventStore
from application.retention.sweeper import LEASE_KEY
from domain.events import DomainEvent
from infrastructure.in_process.lease import InProcessLease
from tests.integration.custom_fields.helpers import fields_of, set_value
from tests.integration.retention.support import (
    MovingClock,
    define_kept,
    expiries,
    on_clock,
    sweeper,
)
from tests.support.results import ok

ENTITIES = [f"c{n}" for n in range(7)]


class Killed(Exception):
    """The process dies here."""


class DyingStore:
    """The app's store, killed on its ``at``-th append: before it commits, or after."""

    def __init__(self, store: EventStore, at: int, *, committed: bool) -> None:
        self.store, self.at, self.committed = store, at, committed
        self.appends = 0

    def load(self, stream_id: Any) -> list[DomainEvent]:
        return self.store.load(stream_id)

    def load_many(self, stream_ids: Iterable[Any]) -> dict[Any, list[DomainEvent]]:
        return self.store.load_many(stream_ids)

    def existing(self, stream_ids: Iterable[Any]) -> set[Any]:
        return self.store.existing(stream_ids)

    def append(self, events: Sequence[DomainEvent], expected: Any = None) -> None:
        self.appends += 1
        if self.appends == self.at and not self.committed:
            raise Killed
        if expected is None:
            self.store.append(events)
        else:
            self.store.append(events, expected)
        if self.appends == self.at:
            raise Killed


@pytest.fixture
def clock() -> MovingClock:
    return MovingClock()


def seeded(make_app: Callable[..., App], clock: MovingClock, admin: User) -> App:
    app = on_clock(make_app, clock)
    define_kept(app, admin, "note", action="anonymize")
    define_kept(app, admin, "tier", "enum", options={"options": ["gold"]})
    for entity in ENTITIES:
        ok(set_value(app, admin, entity, "note", f"note of {entity}"))
        ok(set_value(app, admin, entity, "tier", "gold"))
    clock.move(days=31)
    app.projections.catch_up()
    return app


def once_each(app: App, admin: User) -> None:
    recorded = Counter((e.entity_id, e.field_key) for e in expiries(app, admin.tenant_id, ENTITIES))
    assert recorded == Counter(
        {(entity, key): 1 for entity in ENTITIES for key in ("note", "tier")}
    )
    app.projections.catch_up()
    for entity in ENTITIES:
        assert fields_of(app, admin, entity) == {"note": "[anonymized]"}


@pytest.mark.parametrize("committed", [False, True], ids=["before-commit", "after-commit"])
def test_killed_mid_batch_and_run_again_records_each_expiry_once(
    make_app: Callable[..., App], clock: MovingClock, admin: User, committed: bool
) -> None:
    app = seeded(make_app, clock, admin)
    dying = DyingStore(app.ctx.store, at=2, committed=committed)
    doomed = dataclasses.replace(app.ctx, store=dying)
    lease = InProcessLease(60.0)
    original, app.ctx = app.ctx, doomed
    with pytest.raises(Killed):
        sweeper(app, batch_size=3, lease=lease).run()
    app.ctx = original
    assert lease.held([LEASE_KEY]) == {}  # released on the way out
    # Restarted, the read model not caught up: the batches already recorded come again.
    report = sweeper(app, batch_size=3).run()
    assert report is not None and report.found == 14
    assert report.recorded == (14 - 6 if committed else 14 - 3)
    once_each(app, admin)


def test_a_run_stopped_between_batches_is_finished_by_the_next(
    make_app: Callable[..., App], clock: MovingClock, admin: User
) -> None:
    app = seeded(make_app, clock, admin)
    # A definition at a time, 4 values a batch: note's 4 and 3, then tier's.
    first = sweeper(app, batch_size=4).run(max_batches=2)
    assert first is not None and first.interrupted and first.recorded == 7
    second = sweeper(app, batch_size=4).run()
    assert second is not None and second.recorded == 7
    once_each(app, admin)


def test_two_sweepers_racing_record_each_expiry_once(
    make_app: Callable[..., App], clock: MovingClock, admin: User
) -> None:
    app = seeded(make_app, clock, admin)
    other = on_clock(make_app, clock)  # another process on the same database
    # Each with a lease of its own, as if the lease had failed them both.
    runs = [sweeper(a, batch_size=2, lease=InProcessLease(60.0)) for a in (app, other, app)]
    recorded: list[int] = []
    start = threading.Barrier(len(runs))

    def race(run: Any) -> None:
        start.wait()
        report = run.run()
        recorded.append(report.recorded)

    threads = [threading.Thread(target=race, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(recorded) == 14
    once_each(app, admin)


def test_one_sweeper_at_a_time_under_the_lease(
    make_app: Callable[..., App], clock: MovingClock, admin: User
) -> None:
    app = seeded(make_app, clock, admin)
    lease = InProcessLease(60.0)
    token = lease.acquire(LEASE_KEY)
    assert token is not None
    assert sweeper(app, lease=lease).run() is None  # another holds it: nothing done
    assert expiries(app, admin.tenant_id, ENTITIES) == []
    lease.release(LEASE_KEY, token)
    report = sweeper(app, lease=lease).run()
    assert report is not None and report.recorded == 14
    once_each(app, admin)
