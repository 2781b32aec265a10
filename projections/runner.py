"""The projection runner: exactly-once, batched, on SQLite and PostgreSQL.

For each projection, one step is one transaction:

    lock the projection's tracking row (PostgreSQL ``FOR UPDATE``; SQLite
    ``BEGIN IMMEDIATE``) -> read up to ``batch_size`` events after its position ->
    apply them -> write the new position -> commit.

Invariants: a batch and its position commit together or not at all, so an event is
applied exactly once whatever crashes; concurrent runners (an app's ``catch_up()``
beside ``tidings projections run``) serialise on the tracking row, the later one
seeing the advanced position. The log's global order is commit order (see
``infrastructure.eventstore``), so reading ``position > tracked`` never skips.

Rebuild builds shadow tables from position 0 while the serving tables keep
answering, then, in one transaction holding the serving projection's tracking row,
applies the last events to the shadow, drops the old tables and renames the shadow
ones into place.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from application.ports import EventLog, Progress, ProjectionStatus, SqlCursor, SqlDatabase
from projections.base import Projection

TRACKING_TABLE = "projection_tracking"


class UnknownProjection(LookupError):
    pass


class ProjectionRunner:
    def __init__(
        self,
        db: SqlDatabase,
        log: EventLog,
        projections: Sequence[Projection],
        batch_size: int = 1000,
    ) -> None:
        self.db = db
        self.log = log
        self.projections = {p.name: p for p in projections}
        self.batch_size = batch_size

    # --- set-up -------------------------------------------------------------------

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TRACKING_TABLE} "
                "(name TEXT PRIMARY KEY, position BIGINT NOT NULL)"
            )
            for projection in self.projections.values():
                self._ensure(cur, projection)

    def _ensure(self, cur: SqlCursor, projection: Projection) -> None:
        cur.execute(
            f"INSERT INTO {TRACKING_TABLE} (name, position) VALUES (?, 0) "
            "ON CONFLICT (name) DO NOTHING",
            (projection.name,),
        )
        if cur.rowcount:
            projection.create(cur, self.db.dialect)

    # --- running ------------------------------------------------------------------

    def _locked_position(self, cur: SqlCursor, name: str) -> int:
        lock = " FOR UPDATE" if self.db.dialect == "postgresql" else ""
        cur.execute(f"SELECT position FROM {TRACKING_TABLE} WHERE name = ?{lock}", (name,))
        row = cur.fetchone()
        if row is None:
            raise UnknownProjection(name)
        return int(row[0])

    def _advance(self, cur: SqlCursor, projection: Projection, position: int) -> int:
        batch = self.log.read(position, self.batch_size)
        if batch:
            projection.apply(cur, self.db.dialect, batch)
            cur.execute(
                f"UPDATE {TRACKING_TABLE} SET position = ? WHERE name = ?",
                (batch[-1].position, projection.name),
            )
        return len(batch)

    def step(self, projection: Projection) -> int:
        with self.db.transaction() as cur:
            return self._advance(cur, projection, self._locked_position(cur, projection.name))

    def catch_up(self) -> int:
        """Apply every event written before this call to every read model."""
        applied = 0
        for projection in self.projections.values():
            while count := self.step(projection):
                applied += count
        return applied

    def follow(self, stop: Any, interval: float = 0.5) -> Iterator[int]:
        """Keep catching up until ``stop.is_set()``; yields the count of each round."""
        while not stop.is_set():
            count = self.catch_up()
            yield count
            if not count:
                stop.wait(interval)

    def status(self) -> list[ProjectionStatus]:
        head = self.log.head()
        with self.db.reading() as cur:
            cur.execute(f"SELECT name, position FROM {TRACKING_TABLE} ORDER BY name")
            positions = {name: int(pos) for name, pos in cur.fetchall()}
        return [ProjectionStatus(name, positions.get(name, 0), head) for name in self.projections]

    # --- rebuild ------------------------------------------------------------------

    def rebuild(self, name: str | None = None, progress: Progress | None = None) -> None:
        if name is not None and name not in self.projections:
            raise UnknownProjection(name)
        for projection in self.projections.values():
            if name in (None, projection.name):
                self._rebuild(projection, progress)

    def _rebuild(self, projection: Projection, progress: Progress | None) -> None:
        shadow = projection.shadow()
        with self.db.transaction() as cur:
            for table in shadow.tables.values():
                cur.execute(f"DROP TABLE IF EXISTS {table}")
            cur.execute(f"DELETE FROM {TRACKING_TABLE} WHERE name = ?", (shadow.name,))
            self._ensure(cur, shadow)
        total = self.log.head()
        done = 0
        while count := self.step(shadow):
            done += count
            if progress is not None:
                total = max(total, done)
                progress(done, total)
        with self.db.transaction() as cur:
            self._locked_position(cur, projection.name)
            position = self._locked_position(cur, shadow.name)
            while count := self._advance(cur, shadow, position):
                done += count
                position = self._locked_position(cur, shadow.name)
            for role, table in projection.tables.items():
                cur.execute(f"DROP TABLE IF EXISTS {table}")
                cur.execute(f"ALTER TABLE {shadow.tables[role]} RENAME TO {table}")
            cur.execute(
                f"UPDATE {TRACKING_TABLE} SET position = ? WHERE name = ?",
                (position, projection.name),
            )
            cur.execute(f"DELETE FROM {TRACKING_TABLE} WHERE name = ?", (shadow.name,))
        if progress is not None:
            progress(done, max(done, total))
