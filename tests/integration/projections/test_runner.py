"""The projection runner (docs/projections.md) on both backends: no event skipped or applied twice
under concurrent writers and runners, atomic batches, rebuild while serving, status."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from application import User
from application.app import App
from application.errors import StoreUnavailable
from application.ports import EventLog, LogPage, Recorded, Unreadable
from projections.custom_fields import CustomFieldsProjection
from projections.custom_fields_reader import CustomFieldsReader
from projections.runner import ProjectionRunner
from projections.tracking import UnknownProjection
from tests.integration.custom_fields.helpers import (
    all_entities,
    define,
    fields_of,
    set_value,
)
from tests.integration.projections.support import (
    CountingDatabase,
    CountingProjection,
    Failures,
    bulk_values,
    counting_runner,
    serving,
    start,
)
from tests.support.results import ok


def status_of(app: App, name: str = "custom_fields") -> Any:
    (found,) = [s for s in app.projections.status() if s.name == name]
    return found


def test_tailing_runner_under_concurrent_writers_applies_every_event_once(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app()
    ok(define(app, admin, "n", "number"))
    writers = [make_app() for _ in range(3)]  # like separate processes
    applied = CountingProjection()
    counting = counting_runner(make_app(), batch_size=50, projection=applied)
    tail = make_app()
    failures = Failures()
    done = threading.Event()
    expected: dict[str, int] = {}
    lock = threading.Lock()

    def write(i: int, writer: App) -> None:
        for j in range(30):
            entity_id = f"w{i}-{j % 4}"
            result = set_value(writer, admin, entity_id, "n", j)
            if not result.is_success:
                failures.add(result.error)
                continue
            with lock:
                expected[entity_id] = j
            if j % 10 == 0:  # and a multi-event transaction now and then
                bulk_values(writer, admin.tenant_id, f"bulk{i}-{j}-", 25, per_append=25)
                with lock:
                    expected.update({f"bulk{i}-{j}-{k}": k for k in range(25)})

    def follow() -> None:
        while not done.is_set():
            tail.projections.catch_up()
            counting.catch_up()

    follower = start(follow, failures=failures)
    threads = [start(write, i, w, failures=failures) for i, w in enumerate(writers)]
    for thread in threads:
        thread.join(timeout=120)
    done.set()
    follower.join(timeout=60)
    assert not failures, failures.items
    tail.projections.catch_up()
    counting.catch_up()

    head = serving(app).log.head()
    assert applied.positions(counting.db) == list(range(1, head + 1))
    assert status_of(app).lag == 0
    got = {
        item["entityId"]: item["customFields"]["n"] for item in all_entities(app, admin, limit=500)
    }
    assert got == expected


def test_two_runners_catching_up_at_once_apply_each_event_once(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app()
    bulk_values(app, admin.tenant_id, "pre", 1500, per_append=100)
    projection_a, projection_b = CountingProjection(), CountingProjection()
    runners = [
        counting_runner(make_app(), batch_size=100, projection=projection_a),
        counting_runner(make_app(), batch_size=100, projection=projection_b),
    ]
    failures = Failures()
    barrier = threading.Barrier(3)
    applied: list[int] = []

    def run(runner: ProjectionRunner) -> None:
        barrier.wait()
        for _ in range(3):
            applied.append(runner.catch_up())

    def write_more() -> None:
        barrier.wait()
        for i in range(5):
            bulk_values(app, admin.tenant_id, f"more{i}-", 40, per_append=40)

    threads = [start(run, r, failures=failures) for r in runners]
    threads.append(start(write_more, failures=failures))
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures.items
    applied.append(runners[0].catch_up())

    head = serving(app).log.head()
    assert head == 1700
    assert sum(applied) == head
    assert projection_a.positions(runners[0].db) == list(range(1, head + 1))
    assert sum(projection_a.batches) + sum(projection_b.batches) == head


def test_an_outage_mid_batch_commits_nothing_and_is_applied_once_later(
    app: App, admin: User
) -> None:
    # An outage is not the event's fault: nothing is quarantined, the step fails whole.
    bulk_values(app, admin.tenant_id, "c", 250, per_append=50)
    broken = CountingProjection(fail_at=120, fail_with=StoreUnavailable)
    runner = counting_runner(app, batch_size=100, projection=broken)
    with pytest.raises(StoreUnavailable, match="position 120"):
        runner.catch_up()
    # the first batch (1-100) committed with its position; the failed one left no trace
    assert broken.positions(runner.db) == list(range(1, 101))
    assert [(s.position, s.quarantined) for s in runner.status()] == [(100, 0)]
    broken.fail_at = None
    assert runner.catch_up() == 150
    assert broken.positions(runner.db) == list(range(1, 251))


def test_batches_2500_events_at_1000_take_3_transactions(app: App, admin: User) -> None:
    bulk_values(app, admin.tenant_id, "c", 2500, per_append=500)
    assert serving(app).log.head() == 2500
    db = CountingDatabase(serving(app).db)
    projection = CountingProjection()
    runner = counting_runner(app, batch_size=1000, db=db, projection=projection)
    db.transactions = 0
    assert runner.catch_up() == 2500
    assert projection.batches == [1000, 1000, 500]
    assert db.transactions == 3
    # nothing new: one transaction that finds nothing
    assert runner.catch_up() == 0
    assert db.transactions == 4


def test_status_reports_position_and_lag(app: App, admin: User) -> None:
    start_head = serving(app).log.head()
    ok(define(app, admin, "n", "number"))  # 2 events: the definition and its catalog slot
    for i in range(3):
        ok(set_value(app, admin, f"c{i}", "n", i))
    status = status_of(app)
    assert (status.head, status.lag) == (start_head + 5, start_head + 5 - status.position)
    assert status.lag >= 5
    app.projections.catch_up()
    status = status_of(app)
    assert (status.position, status.head, status.lag) == (start_head + 5, start_head + 5, 0)
    assert {s.name for s in app.projections.status()} >= {"custom_fields"}
    assert all(s.lag == 0 for s in app.projections.status())


def test_follow_applies_new_events_until_stopped(app: App, admin: User) -> None:
    ok(define(app, admin, "n", "number"))
    stop = threading.Event()
    failures = Failures()
    rounds: list[int] = []

    def follow() -> None:
        for count in app.projections.follow(stop, interval=0.02):
            rounds.append(count)

    follower = start(follow, failures=failures)
    ok(set_value(app, admin, "c1", "n", 1))
    deadline = time.monotonic() + 10
    while fields_of(app, admin, "c1") != {"n": 1} and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    follower.join(timeout=10)
    assert not failures, failures.items
    assert not follower.is_alive()
    assert fields_of(app, admin, "c1") == {"n": 1}
    assert sum(rounds) >= 3


def test_rebuild_while_writing_and_querying(make_app: Callable[..., App], admin: User) -> None:  # noqa: C901
    app = make_app()
    ok(define(app, admin, "n", "number", searchable=True))
    seeded = [f"s{i:02}" for i in range(20)]
    for i, entity_id in enumerate(seeded):
        ok(set_value(app, admin, entity_id, "n", i))
    app.projections.catch_up()

    writer, reader = make_app(), make_app()
    failures = Failures()
    stop = threading.Event()
    expected = {entity_id: i for i, entity_id in enumerate(seeded)}
    answered = [0]

    def write() -> None:
        j = 0
        while not stop.is_set():
            entity_id = seeded[j % len(seeded)] if j % 2 else f"new{j:04}"
            result = set_value(writer, admin, entity_id, "n", 1000 + j)
            if not result.is_success:
                failures.add(("write", result.error))
            expected[entity_id] = 1000 + j
            writer.projections.catch_up()  # the serving runner keeps going meanwhile
            j += 1

    def query() -> None:
        while not stop.is_set():
            for entity_id in seeded[:5]:
                fields = fields_of(reader, admin, entity_id)
                if fields is None or "n" not in fields:
                    failures.add(("get-entity", entity_id, fields))
            page = reader.query("list-entities", {"entityName": "contact", "limit": 10}, admin)
            if not page.is_success:
                failures.add(("list-entities", page.error))
            answered[0] += 1

    threads = [start(write, failures=failures), start(query, failures=failures)]
    progress: list[tuple[int, int]] = []
    for _ in range(2):
        app.projections.rebuild(progress=lambda done, total: progress.append((done, total)))
    time.sleep(0.2)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures.items[:5]
    assert answered[0] > 0
    assert progress and progress[-1][0] == progress[-1][1]
    assert all(done <= total for done, total in progress)

    app.projections.catch_up()
    got = {
        item["entityId"]: item["customFields"]["n"] for item in all_entities(app, admin, limit=500)
    }
    assert got == expected

    # the same as a fresh catch-up into brand-new tables
    fresh_tables = {
        "definitions": "fresh_definitions",
        "entity_values": "fresh_values",
        "value_clock": "fresh_clock",
    }
    fresh = ProjectionRunner(
        serving(app).db, serving(app).log, [CustomFieldsProjection(fresh_tables, name="fresh")]
    )
    fresh.setup()
    fresh.catch_up()
    reader_of_fresh = CustomFieldsReader(serving(app).db, fresh_tables)
    # Both readers answer the sealed cells, the same for the same events.
    assert reader_of_fresh.list_entities(admin.tenant_id, "contact", {}, 1000, None) == (
        CustomFieldsReader(serving(app).db).list_entities(
            admin.tenant_id, "contact", {}, 1000, None
        )
    )
    assert len(all_entities(app, admin, limit=500)) == len(expected)
    assert (
        reader_of_fresh.list_definitions(admin.tenant_id, None)
        == (app.query("list-field-definitions", {}, admin).data or {})["items"]
    )


def test_rebuild_of_one_projection_by_name_and_unknown_names(app: App, admin: User) -> None:
    ok(define(app, admin, "n", "number"))
    ok(set_value(app, admin, "c1", "n", 1))
    app.projections.catch_up()
    app.projections.rebuild("custom_fields")
    assert fields_of(app, admin, "c1") == {"n": 1}
    with pytest.raises(UnknownProjection):
        app.projections.rebuild("nope")
    assert status_of(app).lag == 0


def test_catch_up_reaches_the_head_for_every_projection_whatever_was_read_before(
    app: App, admin: User
) -> None:
    # One projection read a short batch at position 0 earlier; more events came since.
    # A later catch_up must still bring every projection to the head.
    bulk_values(app, admin.tenant_id, "a", 3, per_append=3)
    first, second = (
        CountingProjection("applied_a", "first"),
        CountingProjection("applied_b", "second"),
    )
    runner = ProjectionRunner(serving(app).db, serving(app).log, [first, second])
    runner.setup()
    runner.step(second)
    bulk_values(app, admin.tenant_id, "b", 10, per_append=10)
    runner.catch_up()
    head = serving(app).log.head()
    assert first.positions(runner.db) == list(range(1, head + 1))
    assert second.positions(runner.db) == list(range(1, head + 1))
    assert all(s.lag == 0 for s in runner.status())


def test_rebuild_builds_the_shadow_in_batches_even_after_a_short_read_at_position_0(
    app: App, admin: User
) -> None:
    bulk_values(app, admin.tenant_id, "a", 3, per_append=3)
    db = CountingDatabase(serving(app).db)
    projection = CountingProjection()
    runner = counting_runner(app, batch_size=10, db=db, projection=projection)
    runner.catch_up()  # a short batch read at position 0
    bulk_values(app, admin.tenant_id, "b", 40, per_append=40)
    db.transactions = 0
    runner.rebuild()
    # fresh shadow (1) + 43 events in batches of 10 (5) + the swap (1): the bulk of the
    # work is done while the old tables keep serving, not inside the swap transaction
    assert db.transactions == 7
    assert runner.status()[0].lag == 0
    assert projection.positions(db) == list(range(1, 44))


@dataclass
class CountingLog:
    """The serving log, counting the pages read from it."""

    log: EventLog
    pages: int = 0

    def read(self, after: int, limit: int) -> Sequence[Recorded]:
        return self.log.read(after, limit)

    def scan(self, after: int, limit: int) -> Sequence[Recorded | Unreadable]:
        return self.log.scan(after, limit)

    def page(self, after: int, limit: int, topics: frozenset[str] | None) -> LogPage:
        self.pages += 1
        return self.log.page(after, limit, topics)

    def head(self) -> int:
        return self.log.head()


def test_projections_at_one_position_share_one_read_of_a_short_batch(app: App, admin: User) -> None:
    bulk_values(app, admin.tenant_id, "a", 3, per_append=3)
    log = CountingLog(serving(app).log)
    first, second = (
        CountingProjection("applied_a", "first"),
        CountingProjection("applied_b", "second"),
    )
    runner = ProjectionRunner(serving(app).db, log, [first, second])
    runner.setup()
    head = serving(app).log.head()
    assert runner.catch_up() == 2 * head
    assert log.pages == 1  # one read for both, though short
    assert first.positions(runner.db) == second.positions(runner.db) == list(range(1, head + 1))
    # The next catch-up reads afresh: a short page is not kept past its step.
    bulk_values(app, admin.tenant_id, "b", 2, per_append=2)
    assert runner.catch_up() == 4
    assert log.pages == 2
    assert first.positions(runner.db) == list(range(1, head + 3))
