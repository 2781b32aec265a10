"""Test doubles for runner tests: a projection that records every position it applies
(a primary key makes a second application of one event fail loudly), a database wrapper
that counts transactions, bulk event writers, and a tailing reader that finds gaps."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from application.app import App
from application.custom_fields.sealing import seal_value
from application.ports import Dialect, EventLog, Recorded, SqlCursor, SqlDatabase
from domain.custom_field_values import EntityCustomFields, entity_stream_id
from domain.field_definition import definition_id
from projections.base import SHADOW_SUFFIX
from projections.runner import ProjectionRunner


class CountingProjection:
    """One row per applied event position; applying a position twice violates the key."""

    def __init__(
        self,
        table: str = "test_applied",
        name: str = "test_counting",
        fail_at: int | None = None,
        fail_with: type[Exception] = RuntimeError,
    ) -> None:
        self.name = name
        self.tables = {"applied": table}
        self.fail_at = fail_at
        self.fail_with = fail_with
        self.batches: list[int] = []
        self._lock = threading.Lock()

    def shadow(self) -> CountingProjection:
        return CountingProjection(
            self.tables["applied"] + SHADOW_SUFFIX,
            self.name + "__next",
            fail_at=self.fail_at,
            fail_with=self.fail_with,
        )

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self.tables['applied']}"
            " (position BIGINT PRIMARY KEY, topic TEXT NOT NULL)"
        )

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        for recorded in batch:
            cur.execute(
                f"INSERT INTO {self.tables['applied']} (position, topic) VALUES (?, ?)",
                (recorded.position, recorded.event.TOPIC),
            )
            if recorded.position == self.fail_at:
                raise self.fail_with(f"projection failure at position {recorded.position}")
        with self._lock:
            self.batches.append(len(batch))

    def positions(self, db: SqlDatabase) -> list[int]:
        with db.reading() as cur:
            cur.execute(f"SELECT position FROM {self.tables['applied']} ORDER BY position")
            return [int(row[0]) for row in cur.fetchall()]


class CountingDatabase:
    """Counts the write transactions a runner opens."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        self.dialect = db.dialect
        self.transactions = 0

    @contextmanager
    def transaction(self) -> Iterator[SqlCursor]:
        self.transactions += 1
        with self._db.transaction() as cur:
            yield cur

    @contextmanager
    def reading(self) -> Iterator[SqlCursor]:
        with self._db.reading() as cur:
            yield cur


def serving(app: App) -> ProjectionRunner:
    runner = app.projections
    assert isinstance(runner, ProjectionRunner)
    return runner


def counting_runner(
    app: App,
    batch_size: int = 1000,
    db: SqlDatabase | None = None,
    projection: CountingProjection | None = None,
) -> ProjectionRunner:
    base = serving(app)
    runner = ProjectionRunner(
        db or base.db, base.log, [projection or CountingProjection()], batch_size=batch_size
    )
    runner.setup()
    return runner


def bulk_values(
    app: App,
    tenant_id: str,
    prefix: str,
    count: int,
    per_append: int = 100,
    key: str = "n",
    generation: int = 1,
) -> None:
    """Append ``count`` value events straight to the store, ``per_append`` per atomic write.
    Entity ids are ``{prefix}{i}``, each written once with value ``i``."""
    store = app.ctx.store
    now = datetime.now(UTC)
    pending: list[Any] = []
    for i in range(count):
        entity_id = f"{prefix}{i}"
        entity = EntityCustomFields(entity_stream_id(tenant_id, "contact", entity_id))
        sealed, digest = seal_value(
            app.ctx, tenant_id, entity_name="contact", entity_id=entity_id, field_key=key, value=i
        )
        entity.set_value(
            tenant_id=tenant_id,
            entity_name="contact",
            entity_id=entity_id,
            field_key=key,
            definition_id=definition_id(tenant_id, "contact", key),
            generation=generation,
            sealed=sealed,
            digest=digest,
            now=now,
        )
        pending += entity.collect()
        if len(pending) >= per_append:
            store.append(pending)
            pending = []
    if pending:
        store.append(pending)


class Failures:
    """Collects exceptions and failed results from background threads."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._lock = threading.Lock()

    def add(self, item: Any) -> None:
        with self._lock:
            self.items.append(item)

    def __bool__(self) -> bool:
        return bool(self.items)


def start(target: Any, *args: Any, failures: Failures) -> threading.Thread:
    def run() -> None:
        try:
            target(*args)
        except BaseException as error:  # reported by the test
            failures.add(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def tail(
    store: EventLog, stop: threading.Event, seen: list[int], failures: Failures, page: int = 5
) -> None:
    """Read the log in pages of ``page`` until ``stop`` and nothing more: every position
    once, each one after the last (a gap is a failure)."""
    position = 0
    while True:
        finished = stop.is_set()
        batch = store.read(position, page)
        for recorded in batch:
            if recorded.position != position + 1:
                failures.add(f"gap: saw {recorded.position} after {position}")
            position = recorded.position
            seen.append(position)
        if finished and not batch:
            return
