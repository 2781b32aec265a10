"""The value sweep decides from the read model, on both backends: a caught-up read
model costs no load of a stream; a stream that moved past the read model's version
(a value set again between the decision and the append, another key written since the
last catch-up) makes the append conflict, and the batch is decided again from the
streams, so a value set again is kept and each expiry is recorded once."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from application import User
from application.app import App
from application.custom_fields.expiry import ValueSweep
from application.ports import EventStore
from domain.custom_field_values import entity_stream_id
from domain.events import DomainEvent
from infrastructure import bootstrap as wiring
from tests.integration.custom_fields.helpers import fields_of, set_value
from tests.integration.retention.support import (
    MovingClock,
    define_kept,
    expiries,
    on_clock,
    sweeper,
)
from tests.support.results import ok

ENTITIES = ["c1", "c2", "c3"]


class CountingStore:
    """The app's store, counting the streams it loads (each read of one or more)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.loads: list[int] = []

    def load(self, stream_id: Any) -> list[DomainEvent]:
        self.loads.append(1)
        return self.store.load(stream_id)

    def load_many(self, stream_ids: Iterable[Any]) -> dict[Any, list[DomainEvent]]:
        wanted = list(stream_ids)
        if wanted:  # the mail sweeps read their tenants' policies: none here
            self.loads.append(len(wanted))
        return self.store.load_many(wanted)

    def existing(self, stream_ids: Iterable[Any]) -> set[Any]:
        return self.store.existing(stream_ids)

    def append(self, events: Sequence[DomainEvent], expected: Any = None) -> None:
        if expected is None:
            self.store.append(events)
        else:
            self.store.append(events, expected)


@pytest.fixture
def clock() -> MovingClock:
    return MovingClock()


@pytest.fixture
def app(make_app: Callable[..., App], clock: MovingClock, admin: User) -> App:
    app = on_clock(make_app, clock)
    define_kept(app, admin, "note")
    for entity in ENTITIES:
        ok(set_value(app, admin, entity, "note", f"note of {entity}"))
    clock.move(days=31)
    app.projections.catch_up()
    return app


def counting(app: App) -> CountingStore:
    store = CountingStore(app.ctx.store)
    app.ctx = dataclasses.replace(app.ctx, store=store)
    return store


def value_sweep(run: Any) -> ValueSweep:
    found = [s for s in run.sweeps if isinstance(s, ValueSweep)]
    assert len(found) == 1
    return found[0]


def test_a_caught_up_read_model_sweeps_without_loading_a_stream(app: App, admin: User) -> None:
    store = counting(app)
    report = sweeper(app).run()
    assert report is not None and report.recorded == 3
    assert store.loads == []
    app.projections.catch_up()
    assert Counter(e.entity_id for e in expiries(app, admin.tenant_id, ENTITIES)) == Counter(
        ENTITIES
    )
    assert all(fields_of(app, admin, entity) == {} for entity in ENTITIES)


def test_a_value_set_again_after_the_decision_is_not_expired(
    app: App, admin: User, clock: MovingClock
) -> None:
    store = counting(app)
    run = sweeper(app)
    sweep = value_sweep(run)
    reader = sweep.values
    due = reader.due

    def due_then_set_again(*args: Any, **kwargs: Any) -> Any:
        found = due(*args, **kwargs)
        if found:  # decided from the read model; a writer sets c2 again before the append
            ok(set_value(app, admin, "c2", "note", "set again"))
        return found

    reader.due = due_then_set_again  # type: ignore[method-assign]
    report = run.run()
    assert report is not None and report.found == 3 and report.recorded == 2
    assert store.loads == [3]  # the batch decided again from its streams, once
    assert sorted(e.entity_id for e in expiries(app, admin.tenant_id, ENTITIES)) == ["c1", "c3"]
    app.projections.catch_up()
    assert fields_of(app, admin, "c2") == {"note": "set again"}
    assert fields_of(app, admin, "c1") == {}

    # Its clock started again: due only after another 30 days.
    reader.due = due  # type: ignore[method-assign]
    again = sweeper(app).run()
    assert again is not None and again.recorded == 0
    clock.move(days=31)
    app.projections.catch_up()
    last = sweeper(app).run()
    assert last is not None and last.recorded == 1


def test_a_read_model_behind_another_write_records_each_expiry_once(app: App, admin: User) -> None:
    define_kept(app, admin, "tier", keep_for="1y")
    app.projections.catch_up()
    for entity in ENTITIES[:2]:  # written after the catch-up: the read model is behind
        ok(set_value(app, admin, entity, "tier", "kept a year"))
    store = counting(app)
    report = sweeper(app).run()
    assert report is not None and report.recorded == 3
    assert store.loads == [3]
    assert sorted(e.field_key for e in expiries(app, admin.tenant_id, ENTITIES)) == ["note"] * 3
    app.projections.catch_up()
    assert fields_of(app, admin, "c1") == {"tier": "kept a year"}
    assert fields_of(app, admin, "c3") == {}


def test_the_read_model_keeps_each_entitys_stream_version(app: App, admin: User) -> None:
    ok(set_value(app, admin, "c1", "note", "twice"))
    app.projections.catch_up()
    db = wiring.projection_runner(app).db
    with db.reading() as cur:
        cur.execute("SELECT entity_id, version FROM cf_entity_values ORDER BY entity_id")
        versions = dict(cur.fetchall())
    heads = {
        entity: len(app.ctx.store.load(entity_stream_id(admin.tenant_id, "contact", entity)))
        for entity in ENTITIES
    }
    assert versions == heads == {"c1": 2, "c2": 1, "c3": 1}
