"""The event store on both backends: streams, atomic appends and conflicts, a gap-free
global log under concurrent writers, and old event shapes replayed from a fixture."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from application import User
from application.app import App
from application.errors import ConcurrencyConflict
from domain.events import DomainEvent
from domain.field_definition import FieldDefinitionDefined, FieldSlotClaimed
from infrastructure.eventstore.recorder import RecorderEventStore
from tests.integration.custom_fields.helpers import definitions, fields_of
from tests.integration.projections.support import Failures, start, tail

FIXTURES = Path(__file__).parent / "fixtures"


def store_of(app: App) -> RecorderEventStore:
    store = app.ctx.store
    assert isinstance(store, RecorderEventStore)
    return store


def event(stream: UUID, version: int, key: str = "k", tenant: str = "t1") -> DomainEvent:
    return FieldSlotClaimed(
        originator_id=stream,
        originator_version=version,
        timestamp=datetime.now(UTC),
        tenant_id=tenant,
        entity_name="contact",
        field_key=key,
    )


def test_streams_load_in_version_order(app: App) -> None:
    store = store_of(app)
    stream, other = uuid4(), uuid4()
    assert store.load(stream) == []
    first = [event(stream, 1, "a"), event(other, 1, "x"), event(stream, 2, "b")]
    store.append(first)
    store.append([event(stream, 3, "c — ünïcode")])
    loaded = store.load(stream)
    assert [e.field_key for e in loaded if isinstance(e, FieldSlotClaimed)] == [
        "a",
        "b",
        "c — ünïcode",
    ]
    assert len(loaded) == 3
    assert store.load(stream)[:2] == [first[0], first[2]]
    assert store.load(other) == [first[1]]


def test_a_taken_version_is_a_conflict_and_the_whole_append_is_refused(app: App) -> None:
    store = store_of(app)
    stream, fresh = uuid4(), uuid4()
    store.append([event(stream, 1)])
    head = store.head()
    with pytest.raises(ConcurrencyConflict):
        store.append([event(fresh, 1), event(stream, 1)])
    assert store.load(fresh) == []  # atomic: nothing of the failed append was stored
    assert store.head() == head
    with pytest.raises(ConcurrencyConflict):
        store.append([event(fresh, 1), event(fresh, 1)])
    assert store.load(fresh) == []


def test_the_log_reads_in_position_order_from_any_point(app: App) -> None:
    store = store_of(app)
    assert (store.head(), store.read(0, 10)) == (0, [])
    stream = uuid4()
    written = [event(stream, v, f"k{v}") for v in range(1, 8)]
    store.append(written[:3])
    store.append(written[3:])
    assert store.head() == 7
    whole = store.read(0, 100)
    assert [r.position for r in whole] == list(range(1, 8))
    assert [r.event for r in whole] == written
    assert [r.position for r in store.read(2, 3)] == [3, 4, 5]
    assert store.read(7, 10) == []


def test_concurrent_writers_leave_a_gap_free_log_a_tailing_reader_never_skips(
    make_app: Callable[..., App],
) -> None:
    writers = [store_of(make_app()) for _ in range(4)]
    reader = store_of(make_app())
    failures = Failures()
    stop = threading.Event()
    barrier = threading.Barrier(len(writers) + 1)
    seen: list[int] = []

    def write(i: int, store: RecorderEventStore) -> None:
        barrier.wait()
        stream = uuid4()
        for n in range(15):
            store.append([event(stream, 3 * n + v, f"w{i}", tenant=f"w{i}") for v in (1, 2, 3)])

    def tailing() -> None:
        barrier.wait()
        tail(reader, stop, seen, failures, page=7)

    threads = [start(write, i, s, failures=failures) for i, s in enumerate(writers)]
    tailer = start(tailing, failures=failures)
    for thread in threads:
        thread.join(timeout=120)
    stop.set()
    tailer.join(timeout=60)
    assert not failures, failures.items[:5]
    total = len(writers) * 15 * 3
    assert seen == list(range(1, total + 1))
    # each writer's events keep their order in the log
    log = reader.read(0, total + 10)
    for i in range(len(writers)):
        mine = [
            r.event.originator_version
            for r in log
            if isinstance(r.event, FieldSlotClaimed) and r.event.tenant_id == f"w{i}"
        ]
        assert mine == list(range(1, 46))


def load_fixture(app: App, name: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line]
    store_of(app).append_stored(
        [
            (
                UUID(r["originatorId"]),
                r["originatorVersion"],
                r["topic"],
                json.dumps(r["state"], separators=(",", ":")).encode(),
            )
            for r in records
        ]
    )
    return records


def test_v1_events_replay_through_upcasters(app: App) -> None:
    records = load_fixture(app, "v1_custom_fields.jsonl")
    store = store_of(app)
    assert [r.position for r in store.read(0, 10)] == [r["position"] for r in records]
    (defined,) = store.load(UUID(records[0]["originatorId"]))
    assert isinstance(defined, FieldDefinitionDefined)
    assert (defined.display_order, defined.label) == (0, "tier")

    user = User("u", "t-fixture", frozenset({"TenantMember"}))
    app.projections.catch_up()
    expected = [
        {
            "entityName": "contact",
            "fieldKey": "tier",
            "scope": "tenant",
            "field": {"type": "enum", "options": ["gold", "silver"]},
            "required": False,
            "searchable": True,
            "displayOrder": 0,
            "label": "tier",
        }
    ]
    assert definitions(app, user) == expected
    assert fields_of(app, user, "c1") == {"tier": "gold"}
    app.projections.rebuild()
    assert definitions(app, user) == expected
    assert fields_of(app, user, "c1") == {"tier": "gold"}


def test_append_stored_refuses_taken_versions(app: App) -> None:
    load_fixture(app, "v1_custom_fields.jsonl")
    with pytest.raises(ConcurrencyConflict):
        load_fixture(app, "v1_custom_fields.jsonl")
    assert store_of(app).head() == 3
