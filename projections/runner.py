"""The projection runner: exactly-once, batched, on SQLite and PostgreSQL.

For each projection, one step is:

    lock the projection's tracking row (PostgreSQL ``FOR UPDATE``; SQLite
    ``BEGIN IMMEDIATE``) -> read up to ``batch_size`` events after its position ->
    apply them -> write the new position,

in one transaction, which ``catch_up`` and ``rebuild`` share between the steps of all
projections of a round (one commit per page; tracking rows locked in name order).

Invariants: a batch and its position commit together or not at all, so an event is
applied exactly once whatever crashes; concurrent runners (an app's ``catch_up()``
beside ``tidings projections run``) serialise on the tracking row, the later one
seeing the advanced position. The log's global order is commit order (see
``infrastructure.eventstore.recorder``), so reading ``position > tracked`` never skips.

An event a projection cannot apply (or the codec cannot decode) is quarantined
(``projections.quarantine``): the batch is applied under a savepoint; when it fails, its
halves are applied in order, each under its own savepoint, and so on down to single
events: those that fail alone go into the quarantine table. The good ones, the
quarantine rows and the new position still commit together, so each event is applied or
quarantined exactly once.
Only an outage (the database is gone or busy) fails the step, to be retried whole.

Rebuild builds shadow tables from position 0 while the serving tables keep
answering, then, in one transaction holding the serving projection's tracking row,
applies the last events to the shadow, drops the old tables and renames the shadow
ones into place; the shadow's quarantine replaces the serving one's.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg

from application.errors import StoreUnavailable
from application.ports import (
    EventLog,
    LogPage,
    Progress,
    ProjectionStatus,
    Recorded,
    RetryOutcome,
    SqlCursor,
    SqlDatabase,
    Unreadable,
)
from projections import quarantine
from projections.base import (
    SHADOW_SUFFIX,
    ConsumesTopics,
    InvalidProjection,
    Projection,
    RebuildsInPlace,
    check_name,
    identifier,
)
from projections.quarantine import QuarantineCollector, Quarantined
from projections.retry import retry_quarantined
from projections.tracking import (
    TRACKING_TABLE,
    UnknownProjection,
    locked_positions,
    move_positions,
)

log = logging.getLogger("tidings.projections")

# SQLite reports bad data ("malformed JSON") as OperationalError too: only these say that
# the database itself is unavailable.
_SQLITE_OUTAGES = ("locked", "busy", "disk i/o", "unable to open", "readonly", "full")


def is_outage(error: BaseException) -> bool:
    """Whether the database is unavailable (the step fails whole, to be retried) rather
    than the event bad (it is quarantined)."""
    if isinstance(error, StoreUnavailable | psycopg.OperationalError | psycopg.InterfaceError):
        return True
    return isinstance(error, sqlite3.OperationalError) and any(
        word in str(error).lower() for word in _SQLITE_OUTAGES
    )


def _consumed(projections: Iterable[Projection]) -> frozenset[str] | None:
    """The topics any of them consumes; None (every topic) when one does not say."""
    topics: set[str] = set()
    for projection in projections:
        if not isinstance(projection, ConsumesTopics):
            return None
        topics |= projection.topics
    return frozenset(topics)


class ProjectionRunner:
    def __init__(
        self,
        db: SqlDatabase,
        log: EventLog,
        projections: Sequence[Projection],
        batch_size: int = 5000,
    ) -> None:
        self.db = db
        self.log = log
        self.projections = {p.name: p for p in projections}
        self.batch_size = batch_size
        # The last page read, by the position it was read after: projections standing
        # at one position share it, so the log is read and decoded once, not once each.
        # Reusing it is safe: the log is append-only and gap-free in commit order, so a
        # page read after a position stays a prefix of what follows that position.
        self._last_read: tuple[int, LogPage] = (-1, LogPage((), 0, 0))
        self._topics = _consumed(self.projections.values())

    # --- set-up -------------------------------------------------------------------

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TRACKING_TABLE} "
                "(name TEXT PRIMARY KEY, position BIGINT NOT NULL)"
            )
            quarantine.create(cur)
            for projection in self.projections.values():
                self._ensure(cur, projection)

    def register(self, projections: Sequence[Projection]) -> None:
        """Add the host's projections beside the built-in ones (after ``setup``).

        Refused with ``InvalidProjection``, before anything is written: a name that is
        not a lower-case identifier, ends in the shadow suffix, or is taken (a built-in
        projection's, or another host projection's); a table name that is not a plain
        identifier or is another projection's table (a rebuild drops and renames them).
        """
        taken = set(self.projections)
        owned = {table for p in self.projections.values() for table in p.tables.values()}
        for projection in projections:
            name = check_name(projection.name)
            if name in taken:
                raise InvalidProjection(f"projection name {name!r} is already taken")
            taken.add(name)
            for table in projection.tables.values():
                identifier(table, f"table of projection {name!r}")
                if table in owned or table.endswith(SHADOW_SUFFIX):
                    raise InvalidProjection(
                        f"table {table!r} of projection {name!r} is another projection's"
                        f" (or ends in {SHADOW_SUFFIX!r}, which shadows use)"
                    )
                owned.add(table)
        with self.db.transaction() as cur:
            for projection in projections:
                self._ensure(cur, projection)
        for projection in projections:
            self.projections[projection.name] = projection
        self._topics = _consumed(self.projections.values())
        self._last_read = (-1, LogPage((), 0, 0))

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
        return locked_positions(cur, self.db.dialect, [name])[name]

    def _read(self, position: int) -> LogPage:
        after, page = self._last_read
        # Only a full page is reused: a short one ended at the head of its time, and the
        # log may have grown since (reusing it would stop a catch-up short of the head).
        if after != position or page.count < self.batch_size:
            page = self.log.page(position, self.batch_size, self._topics)
            self._last_read = (position, page)
        return page

    def _advance(
        self,
        cur: SqlCursor,
        projection: Projection,
        position: int,
        shared: dict[int, LogPage] | None = None,
        moved: dict[int, list[str]] | None = None,
    ) -> int:
        """Apply the page after ``position`` and move past it (``moved``: noted there,
        for the caller to write)."""
        page = shared.get(position) if shared is not None else None
        if page is None:
            page = self._read(position)
            if shared is not None:
                shared[position] = page
        if page.count:
            entries = page.entries
            # ``ConsumesTopics``, asked without a protocol isinstance (it walks members).
            wanted = getattr(projection, "topics", None)
            if wanted is not None:
                entries = [
                    e for e in entries if isinstance(e, Unreadable) or e.event.TOPIC in wanted
                ]
            if entries:
                self._apply(cur, projection, entries)
            if moved is None:
                move_positions(cur, {page.last: [projection.name]})
            else:
                moved.setdefault(page.last, []).append(projection.name)
        return page.count

    def _apply(
        self, cur: SqlCursor, projection: Projection, batch: Sequence[Recorded | Unreadable]
    ) -> None:
        readable = [entry for entry in batch if isinstance(entry, Recorded)]
        for entry in batch:
            if isinstance(entry, Unreadable):
                self._quarantine(
                    cur,
                    projection,
                    position=entry.position,
                    tenant_id=entry.tenant_id,
                    topic=entry.topic,
                    error=entry.error,
                )
        if readable:
            self._apply_or_split(cur, projection, readable)

    def _apply_or_split(
        self, cur: SqlCursor, projection: Projection, batch: Sequence[Recorded]
    ) -> None:
        """Apply the batch whole; when it fails, apply its halves in order, and so on down
        to single events: one that fails alone is quarantined. A poison event costs about
        two attempts per halving (~26 in 5,000), not one per event of its batch."""
        error = self._attempt(cur, projection, batch)
        if error is None:
            return
        if len(batch) > 1:
            middle = len(batch) // 2
            self._apply_or_split(cur, projection, batch[:middle])
            self._apply_or_split(cur, projection, batch[middle:])
            return
        (recorded,) = batch
        event = recorded.event
        tenant = getattr(event, "tenant_id", None)
        self._quarantine(
            cur,
            projection,
            position=recorded.position,
            tenant_id=tenant if isinstance(tenant, str) else None,
            topic=event.TOPIC,
            error=error,
        )

    def _attempt(
        self, cur: SqlCursor, projection: Projection, batch: Sequence[Recorded]
    ) -> Exception | None:
        """Apply under a savepoint; on failure roll back to it and answer the error."""
        cur.execute("SAVEPOINT projection_apply")
        try:
            projection.apply(cur, self.db.dialect, batch)
        except Exception as error:  # any failure of one event is quarantined
            if is_outage(error):
                raise
            cur.execute("ROLLBACK TO SAVEPOINT projection_apply")
            cur.execute("RELEASE SAVEPOINT projection_apply")
            return error
        cur.execute("RELEASE SAVEPOINT projection_apply")
        return None

    def _quarantine(
        self,
        cur: SqlCursor,
        projection: Projection,
        *,
        position: int,
        tenant_id: str | None,
        topic: str,
        error: BaseException,
    ) -> None:
        log.error(
            "event=quarantined projection=%s position=%d tenant=%s topic=%s error=%s",
            projection.name,
            position,
            quarantine.storable(tenant_id or "-", 80),
            quarantine.storable(topic, 120),
            type(error).__name__,
        )
        quarantine.add(
            cur, projection.name, position=position, tenant_id=tenant_id, topic=topic, error=error
        )

    def step(self, projection: Projection) -> int:
        with self.db.transaction() as cur:
            return self._advance(cur, projection, self._locked_position(cur, projection.name))

    def _step_together(self, projections: Sequence[Projection]) -> list[int]:
        """``step`` for each, all in one transaction: one commit per page instead of one
        per projection. Each still applies under its own savepoints and moves its own
        position, so each is exactly once as before; the tracking rows are locked in
        name order, the same order every runner takes them in."""
        if len(projections) == 1:
            return [self.step(projections[0])]
        counts: dict[str, int] = {}
        # This step's reads, short ones too: projections at one position apply the same
        # page (a burst's pages are short; reading one per projection read it thrice). A
        # short page is reused only within the step, so the next step reads afresh.
        shared: dict[int, LogPage] = {}
        # Positions read in one statement, written in one per new position (mostly one):
        # an inline catch-up runs this per batch of writes.
        moved: dict[int, list[str]] = {}
        with self.db.transaction() as cur:
            ordered = sorted(projections, key=lambda p: p.name)
            positions = locked_positions(cur, self.db.dialect, [p.name for p in ordered])
            for projection in ordered:
                position = positions[projection.name]
                counts[projection.name] = self._advance(cur, projection, position, shared, moved)
            move_positions(cur, moved)
        return [counts[projection.name] for projection in projections]

    def catch_up(self) -> int:
        """Apply every event written before this call to every read model."""
        applied = 0
        pending = list(self.projections.values())
        # Round-robin, a batch each, so that projections at one position share each read.
        # A short batch reached the head, which already covers every event written
        # before this call: no extra empty transaction (2,500 events = 3 at 1,000).
        while pending:
            counts = self._step_together(pending)
            applied += sum(counts)
            pending = [p for p, n in zip(pending, counts, strict=True) if n >= self.batch_size]
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
            held = quarantine.counts(cur)
        return [
            ProjectionStatus(name, positions.get(name, 0), head, held.get(name, 0))
            for name in self.projections
        ]

    # --- quarantine ---------------------------------------------------------------

    def quarantined(self, name: str | None = None, limit: int = 1000) -> list[Quarantined]:
        """The quarantined events (of one projection, or all), in log order."""
        if name is not None and name not in self.projections:
            raise UnknownProjection(name)
        with self.db.reading() as cur:
            return quarantine.listing(cur, name, limit)

    def retry(self, name: str, position: int) -> RetryOutcome:
        """Apply one quarantined event again (``projections.retry``)."""
        projection = self.projections.get(name)
        if projection is None:
            raise UnknownProjection(name)
        return retry_quarantined(self, projection, position)

    def quarantine_counts(self) -> dict[str, int]:
        with self.db.reading() as cur:
            found = quarantine.counts(cur)
        return {name: found.get(name, 0) for name in self.projections}

    def metrics_collector(self) -> QuarantineCollector:
        """``tidings_projection_quarantined``, for a Prometheus registry."""
        return QuarantineCollector(self.quarantine_counts, lambda: list(self.projections))

    # --- rebuild ------------------------------------------------------------------

    def rebuild(self, name: str | None = None, progress: Progress | None = None) -> None:
        if name is not None and name not in self.projections:
            raise UnknownProjection(name)
        chosen = [p for p in self.projections.values() if name in (None, p.name)]
        for in_place in [p for p in chosen if isinstance(p, RebuildsInPlace)]:
            self._rebuild_in_place(in_place, progress)
        chosen = [p for p in chosen if not isinstance(p, RebuildsInPlace)]
        if not chosen:
            return
        shadows = [self._fresh_shadow(projection) for projection in chosen]
        total = self.log.head()
        done = 0
        # The shadows advance in step, a batch each, so each batch is read once for all;
        # a short batch reached the head, and the swap applies whatever came since.
        while True:
            count = max(self._step_together(shadows), default=0)
            done += count
            if progress is not None:
                total = max(total, done)
                progress(done, total)
            if count < self.batch_size:
                break
        for projection, shadow in zip(chosen, shadows, strict=True):
            self._swap(projection, shadow)
        if progress is not None:
            progress(max(done, total), max(done, total))

    def _rebuild_in_place(self, projection: Projection, progress: Progress | None) -> None:
        """Reset and replay the whole log in one transaction holding the tracking row:
        readers see the old state until it commits, and its quarantine is replaced."""
        assert isinstance(projection, RebuildsInPlace)
        total = self.log.head()
        with self.db.transaction() as cur:
            self._locked_position(cur, projection.name)
            projection.reset(cur, self.db.dialect)
            quarantine.forget(cur, projection.name)
            cur.execute(
                f"UPDATE {TRACKING_TABLE} SET position = 0 WHERE name = ?", (projection.name,)
            )
            position, done = 0, 0
            while count := self._advance(cur, projection, position):
                done += count
                position = self._locked_position(cur, projection.name)
                if progress is not None:
                    total = max(total, done)
                    progress(done, total)

    def _fresh_shadow(self, projection: Projection) -> Projection:
        shadow = projection.shadow()
        with self.db.transaction() as cur:
            for table in shadow.tables.values():
                cur.execute(f"DROP TABLE IF EXISTS {table}")
            cur.execute(f"DELETE FROM {TRACKING_TABLE} WHERE name = ?", (shadow.name,))
            quarantine.forget(cur, shadow.name)
            self._ensure(cur, shadow)
        return shadow

    def _swap(self, projection: Projection, shadow: Projection) -> None:
        """Catch the shadow up under the serving projection's lock, then swap it in."""
        with self.db.transaction() as cur:
            self._locked_position(cur, projection.name)
            position = self._locked_position(cur, shadow.name)
            while self._advance(cur, shadow, position):
                position = self._locked_position(cur, shadow.name)
            for role, table in projection.tables.items():
                cur.execute(f"DROP TABLE IF EXISTS {table}")
                cur.execute(f"ALTER TABLE {shadow.tables[role]} RENAME TO {table}")
            cur.execute(
                f"UPDATE {TRACKING_TABLE} SET position = ? WHERE name = ?",
                (position, projection.name),
            )
            cur.execute(f"DELETE FROM {TRACKING_TABLE} WHERE name = ?", (shadow.name,))
            quarantine.forget(cur, projection.name)
            quarantine.rename(cur, shadow.name, projection.name)
