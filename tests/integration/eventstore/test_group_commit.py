"""The app layer's group commit on both backends: concurrent appends of one store share
transactions, yet the log stays gap-free for a tailing projection, and each caller gets
its own outcome (a version conflict inside a batch fails only its caller; a batch the
database refuses is written caller by caller)."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from application import User
from application.app import App
from application.errors import ConcurrencyConflict
from application.streams import ATTEMPTS
from domain.custom_field_values import entity_stream_id
from domain.field_definition import FieldSlotClaimed
from infrastructure.eventstore.recorder import EVENTS_TABLE, RecorderEventStore
from infrastructure.sql.database import DatabaseUrl
from tests.integration.custom_fields.helpers import define, fields_of, set_value
from tests.integration.eventstore.test_eventstore import event, store_of
from tests.integration.projections.support import (
    CountingProjection,
    Failures,
    counting_runner,
    serving,
    start,
    tail,
)
from tests.support.results import ok

WRITERS = 8
APPENDS = 25


@contextlib.contextmanager
def writes_held(database_url: str) -> Iterator[None]:
    """Hold the event table's write lock from a connection of our own, so that the next
    append waits inside its transaction and later callers queue behind it."""
    url = DatabaseUrl.parse(database_url)
    if url.dialect == "sqlite":
        assert url.sqlite_path is not None
        conn = sqlite3.connect(url.sqlite_path, isolation_level=None, timeout=30)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    with psycopg.connect(url.conninfo) as pg:
        pg.execute(f'LOCK TABLE "{url.schema}".{EVENTS_TABLE} IN EXCLUSIVE MODE')
        try:
            yield
        finally:
            pg.rollback()


def appending(
    store: RecorderEventStore, events: list[Any], expected: dict[UUID, int] | None = None
) -> Callable[[], BaseException | None]:
    """Start an append in a thread (checking the ``expected`` streams' versions); the
    returned call joins it and answers its outcome."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            store.append(events, expected)
        except Exception as error:
            outcome.append(error)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result() -> BaseException | None:
        thread.join(60)
        assert not thread.is_alive(), "an append hangs"
        return outcome[0]

    return result


def test_concurrent_group_commits_leave_a_gap_free_log_a_tailing_projection_applies_once(
    make_app: Callable[..., App],
) -> None:
    apps = [make_app(), make_app()]  # two "processes", each with its own group commit
    stores = [store_of(app) for app in apps]
    projection = CountingProjection()
    runner = counting_runner(apps[0], batch_size=7, projection=projection)
    failures = Failures()
    stop = threading.Event()
    barrier = threading.Barrier(2 * WRITERS + 2)
    seen: list[int] = []

    def write(i: int, store: RecorderEventStore) -> None:
        barrier.wait()
        stream = uuid4()
        for n in range(APPENDS):
            store.append([event(stream, 2 * n + v, f"w{i}", tenant=f"w{i}") for v in (1, 2)])

    def read() -> None:
        barrier.wait()
        tail(stores[1], stop, seen, failures)

    def project() -> None:
        barrier.wait()
        while not stop.is_set():
            runner.catch_up()
        runner.catch_up()

    writers = [start(write, i, stores[i % 2], failures=failures) for i in range(2 * WRITERS)]
    readers = [start(read, failures=failures), start(project, failures=failures)]
    for thread in writers:
        thread.join(timeout=120)
    stop.set()
    for thread in readers:
        thread.join(timeout=60)
    assert not failures, failures.items[:5]
    total = 2 * WRITERS * APPENDS * 2
    assert seen == list(range(1, total + 1))
    assert projection.positions(serving(apps[0]).db) == list(range(1, total + 1))
    assert max(projection.batches) > 1
    log = stores[0].read(0, total + 10)
    for i in range(2 * WRITERS):  # each caller's events together and in order
        mine = [
            r.event.originator_version
            for r in log
            if isinstance(r.event, FieldSlotClaimed) and r.event.tenant_id == f"w{i}"
        ]
        assert mine == list(range(1, 2 * APPENDS + 1))


def test_callers_of_one_batch_get_their_own_conflicts(
    app: App, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_of(app)
    taken, shared, free, lone = uuid4(), uuid4(), uuid4(), uuid4()
    store.append([event(taken, 1)])
    with writes_held(database_url):
        leader = appending(store, [event(lone, 1)])  # waits for the lock in its transaction
        time.sleep(0.5)
        queued = {
            "first claim": appending(store, [event(shared, 1, "a")]),
            "second claim": appending(store, [event(shared, 1, "b"), event(free, 2)]),
            "taken in the log": appending(store, [event(taken, 1, "late")]),
            "free": appending(store, [event(free, 1)]),
        }
        time.sleep(1.0)  # they queue behind the leader's batch
    with caplog.at_level(logging.INFO, logger="tidings.eventstore"):
        outcomes = {name: result() for name, result in queued.items()}
    assert leader() is None
    assert outcomes["first claim"] is None
    assert isinstance(outcomes["second claim"], ConcurrencyConflict)
    assert isinstance(outcomes["taken in the log"], ConcurrencyConflict)
    assert outcomes["free"] is None
    assert [e.field_key for e in store.load(shared) if isinstance(e, FieldSlotClaimed)] == ["a"]
    assert len(store.load(free)) == 1  # the second claim's other event is not stored either
    assert len(store.load(taken)) == 1
    assert "group_commit.apart callers=" in caplog.text, "the refused batch went in apart"


def test_a_refused_batch_is_written_apart_and_positions_stay_in_commit_order(
    app: App, database_url: str
) -> None:
    store = store_of(app)
    taken = uuid4()
    store.append([event(taken, 1)])
    head = store.head()
    fresh: list[UUID] = [uuid4() for _ in range(6)]
    with writes_held(database_url):
        leader = appending(store, [event(uuid4(), 1)])
        time.sleep(0.5)
        results = [appending(store, [event(s, 1), event(s, 2)]) for s in fresh[:3]]
        results.append(appending(store, [event(taken, 1, "bad")]))
        results += [appending(store, [event(s, 1), event(s, 2)]) for s in fresh[3:]]
        time.sleep(1.0)
    assert leader() is None
    outcomes = [result() for result in results]
    assert [o is None for o in outcomes] == [True, True, True, False, True, True, True]
    assert all(len(store.load(s)) == 2 for s in fresh)
    log = store.read(head, 100)
    assert [r.position for r in log] == sorted(r.position for r in log)
    by_stream: dict[UUID, list[int]] = {}
    for recorded in log:
        by_stream.setdefault(recorded.event.originator_id, []).append(recorded.position)
    for positions in by_stream.values():  # each caller's events are adjacent
        assert positions == list(range(positions[0], positions[0] + len(positions)))


def test_concurrent_value_writes_through_one_app_all_land_with_inline_projection(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app(project_inline=True)
    ok(define(app, admin, "tier"))
    failures = Failures()
    barrier = threading.Barrier(WRITERS)

    def write(i: int) -> None:
        barrier.wait()
        for n in range(10):
            result = set_value(app, admin, f"c{i}", "tier", f"v{n}")
            if not result.is_success:
                failures.add(result.error)
        if i < ATTEMPTS:
            # One shared entity: each loser of a race reloads and retries; a writer
            # loses at most once to each other writer, so this many always get through.
            result = set_value(app, admin, "shared", "tier", f"from {i}")
            if not result.is_success:
                failures.add(result.error)

    threads = [start(write, i, failures=failures) for i in range(WRITERS)]
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures.items[:5]
    # inline: every write is visible when it returns, without a catch-up of our own
    assert all(fields_of(app, admin, f"c{i}") == {"tier": "v9"} for i in range(WRITERS))
    assert (fields_of(app, admin, "shared") or {}).get("tier") in {
        f"from {i}" for i in range(ATTEMPTS)
    }
    assert len(app.ctx.store.load(entity_stream_id(admin.tenant_id, "contact", "shared"))) == (
        ATTEMPTS
    )
