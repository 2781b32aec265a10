"""The event store on eventsourcing's recorders (SQLite file or PostgreSQL).

We use the library's ``ApplicationRecorder`` directly, and insert as its insert path
does, in the order that is safe for tailing readers (SQLite: one writer at a time;
PostgreSQL: a table lock per write transaction), so the projection runner never
skips an event committed late by a slower writer. The library's database-function
insert path is deliberately not enabled: it takes no table lock and lets a tailing
reader skip events (ours, ``checked_insert.py``, takes it first).

Long streams (a tenant's field catalog gains an event at every define and delete) keep
their decoded events in a small in-process cache, so a load reads and decodes only the
events after the cached version: stored events are never changed or removed, so a
cached prefix stays true, and every load still asks the database for what is newer.
``load_many`` reads several streams' news in one statement (one round trip).

Appends go through a group commit (``group_commit.py``): concurrent callers' events are
inserted in one transaction, each caller answered with its own outcome. A version
conflict inside the combined batch fails only its caller: callers of one batch that
claim the same (stream, version) are told apart before the insert, and a combined insert
the database refuses is retried caller by caller (like the watch path's
``store_apart``), so one bad write never fails the others. An unavailable database
fails the whole batch at once (503), and every caller queued behind it: writing them
apart, or in another batch, would only multiply the wait. A caller may name streams it
decided on without writing them (``expected``): the batch checks them inside its
transaction (``checked_insert.py``) and a caller whose read moved on gets ``StaleRead``
alone.

Reading the log back (positions, pages, unreadable events) is ``log.py``'s
``RecorderEventLog``, this store's base.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from uuid import UUID

from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    InterfaceError,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore
from eventsourcing.utils import retry
from psycopg.sql import SQL, Identifier

from application.errors import (
    ConcurrencyConflict,
    StaleRead,
    StoreUnavailable,
)
from domain.events import DomainEvent
from infrastructure.eventstore.checked_insert import PendingAppend, insert_checked
from infrastructure.eventstore.codec import EventCodec
from infrastructure.eventstore.group_commit import Entry, GroupCommit
from infrastructure.eventstore.log import RecorderEventLog, sqlite_read
from infrastructure.eventstore.typed_array import TypedArrayPostgresRecorder
from infrastructure.sql.array_literal import plain
from infrastructure.sql.database import DatabaseUrl

EVENTS_TABLE = "stored_events"

log = logging.getLogger("tidings.eventstore")


class _StreamCache:
    """Decoded events of recently loaded long streams, least recently used out first."""

    def __init__(self, min_events: int = 16, max_events: int = 20_000) -> None:
        self.min_events = min_events
        self.max_events = max_events
        self._streams: OrderedDict[UUID, tuple[DomainEvent, ...]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, stream_id: UUID) -> tuple[DomainEvent, ...]:
        with self._lock:
            events = self._streams.get(stream_id, ())
            if events:
                self._streams.move_to_end(stream_id)
            return events

    def put(self, stream_id: UUID, events: tuple[DomainEvent, ...]) -> None:
        if len(events) < self.min_events:
            return
        with self._lock:
            self._size += len(events) - len(self._streams.pop(stream_id, ()))
            self._streams[stream_id] = events
            while self._size > self.max_events and self._streams:
                self._size -= len(self._streams.popitem(last=False)[1])


def _unclaimed(batch: Sequence[Entry[PendingAppend]]) -> list[Entry[PendingAppend]]:
    """The entries to insert: a later caller of the batch that claims a (stream,
    version) an earlier one claims gets its conflict now (its retry reloads after the
    batch is committed)."""
    accepted: list[Entry[PendingAppend]] = []
    claimed: set[tuple[UUID | str, int]] = set()
    for entry in batch:
        keys = {(e.originator_id, e.originator_version) for e in entry.item.events}
        if keys & claimed:
            entry.error = ConcurrencyConflict("a stream version is taken already")
        else:
            claimed |= keys
            accepted.append(entry)
    return accepted


def _mark_stale(entries: Sequence[Entry[PendingAppend]], stale: Sequence[bool]) -> None:
    for entry, gone in zip(entries, stale, strict=True):
        if gone:
            entry.error = StaleRead("a stream the caller decided on has moved on")


class RecorderEventStore(RecorderEventLog):
    """Implements the ``EventStore`` port, and the ``EventLog`` through its base."""

    def __init__(self, recorder: ApplicationRecorder, codec: EventCodec) -> None:
        super().__init__(recorder, codec)
        self._cache = _StreamCache()
        self._group: GroupCommit[PendingAppend] = GroupCommit(
            self._write_batch, outages=(StoreUnavailable,), after=self._after_batch
        )
        self._seen = threading.local()  # this thread's last batch, and its inline mark
        self._catch_up: Callable[[int], None] | None = None

    def load(self, stream_id: UUID) -> list[DomainEvent]:
        known = self._cache.get(stream_id)
        after = known[-1].originator_version if known else None
        try:
            stored = self.recorder.select_events(stream_id, gt=after)
        except (OperationalError, InterfaceError) as error:
            raise StoreUnavailable(str(error)) from None
        if not stored:
            return list(known)
        events = (
            *known,
            *(
                self.codec.decode(s.originator_id, s.originator_version, s.topic, s.state)
                for s in stored
            ),
        )
        self._cache.put(stream_id, events)
        return list(events)

    def load_many(self, stream_ids: Iterable[UUID]) -> dict[UUID, list[DomainEvent]]:
        """Every event of each stream (empty for a new one), read in one statement."""
        wanted = list(dict.fromkeys(stream_ids))
        known = {u: self._cache.get(u) for u in wanted}
        after = {u: (k[-1].originator_version if k else -1) for u, k in known.items()}
        try:
            rows: list[tuple[UUID, int, str, bytes]] = self._select_many(after) if wanted else []
        except (OperationalError, InterfaceError) as error:
            raise StoreUnavailable(str(error)) from None
        news: defaultdict[UUID, list[DomainEvent]] = defaultdict(list)
        for stream, version, topic, state in rows:
            news[stream].append(self.codec.decode(stream, version, topic, state))
        loaded: dict[UUID, list[DomainEvent]] = {}
        for stream in wanted:
            events = (*known[stream], *news.get(stream, ()))
            if stream in news:
                self._cache.put(stream, events)
            loaded[stream] = list(events)
        return loaded

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def _select_many(self, after: dict[UUID, int]) -> list[tuple[UUID, int, str, bytes]]:
        recorder = self.recorder
        if isinstance(recorder, PostgresApplicationRecorder):
            query = SQL(
                "SELECT e.originator_id, e.originator_version, e.topic, e.state"
                " FROM unnest(%s::uuid[], %s::bigint[]) AS w(id, after)"
                " JOIN {schema}.{table} e"
                " ON e.originator_id = w.id AND e.originator_version > w.after"
                " ORDER BY e.originator_id, e.originator_version"
            ).format(
                schema=Identifier(recorder.datastore.schema),
                table=Identifier(recorder.events_table_name),
            )
            with recorder.datastore.get_connection() as conn, conn.cursor() as curs:
                # Planned on every call, never prepared: a prepared join keeps the generic
                # plan of the log's size when it was prepared, and one made on a nearly
                # empty log hashes the whole table on every later load
                # (docs/decisions/no-plan-from-an-empty-log.md).
                curs.execute(query, (plain(after), plain(after.values())), prepare=False)
                return [
                    (
                        UUID(str(r["originator_id"])),
                        r["originator_version"],
                        r["topic"],
                        bytes(r["state"]),
                    )
                    for r in curs.fetchall()
                ]
        if isinstance(recorder, SQLiteApplicationRecorder):
            streams = list(after.items())
            statements = [
                (
                    "SELECT originator_id, originator_version, topic, state"
                    f" FROM {recorder.events_table_name} WHERE "
                    + " OR ".join(["(originator_id = ? AND originator_version > ?)"] * len(chunk))
                    + " ORDER BY originator_id, originator_version",
                    [v for stream, gt in chunk for v in (stream.hex, gt)],
                )
                for chunk in (
                    streams[at : at + 400]  # SQLite's bound-variable limit
                    for at in range(0, len(streams), 400)
                )
            ]
            if len(statements) == 1:  # one statement: its own snapshot, no transaction
                found = sqlite_read(recorder, *statements[0])
            else:
                found = []
                with recorder.datastore.transaction(commit=False) as cursor:
                    for statement, params in statements:
                        cursor.execute(statement, params)
                        found += cursor.fetchall()
            return [(UUID(r[0]), r[1], r[2], r[3]) for r in found]
        return [
            (u, e.originator_version, e.topic, e.state)
            for u, gt in after.items()
            for e in recorder.select_events(u, gt=gt)
        ]

    def existing(self, stream_ids: Iterable[UUID]) -> set[UUID]:
        """Which of these streams hold any event: one query, whatever their number."""
        wanted = list(dict.fromkeys(stream_ids))
        if not wanted:
            return set()
        try:
            found: set[UUID] = self._existing(wanted)
            return found
        except (OperationalError, InterfaceError) as error:
            raise StoreUnavailable(str(error)) from None

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def _existing(self, wanted: list[UUID]) -> set[UUID]:
        recorder = self.recorder
        if isinstance(recorder, PostgresApplicationRecorder):
            query = SQL(
                "SELECT DISTINCT originator_id FROM {schema}.{table}"
                " WHERE originator_id = ANY(%s::uuid[])"
            ).format(
                schema=Identifier(recorder.datastore.schema),
                table=Identifier(recorder.events_table_name),
            )
            with recorder.datastore.transaction(commit=False) as curs:
                curs.execute(query, (wanted,))
                return {UUID(str(row["originator_id"])) for row in curs.fetchall()}
        if isinstance(recorder, SQLiteApplicationRecorder):
            found: set[UUID] = set()
            with recorder.datastore.transaction(commit=False) as cursor:
                for at in range(0, len(wanted), 500):  # SQLite's bound-variable limit
                    chunk = wanted[at : at + 500]
                    marks = ",".join("?" * len(chunk))
                    cursor.execute(
                        f"SELECT DISTINCT originator_id FROM {recorder.events_table_name}"
                        f" WHERE originator_id IN ({marks})",
                        [u.hex for u in chunk],
                    )
                    found |= {UUID(row[0]) for row in cursor.fetchall()}
            return found
        return {u for u in wanted if self.load(u)}

    def append(
        self, events: Sequence[DomainEvent], expected: Mapping[UUID, int] | None = None
    ) -> None:
        stored = [self.codec.encode(e) for e in events]
        if stored:
            inline = getattr(self._seen, "inline", False)
            pending = PendingAppend(stored, expected or {}, inline)
            self._seen.batch = self._group.submit(pending, len(stored))

    def committed(self) -> int:
        return self._group.batches

    def committed_by_this_thread(self) -> int:
        batch: int = getattr(self._seen, "batch", 0)
        return batch

    def catch_up_after_batches(self, catch_up: Callable[[int], None]) -> None:
        self._catch_up = catch_up

    @contextmanager
    def inline(self) -> Iterator[None]:
        self._seen.inline = True
        try:
            yield
        finally:
            self._seen.inline = False

    def _after_batch(self, batch: Sequence[Entry[PendingAppend]]) -> None:
        """In the leading thread, before the batch's callers are answered: the inline
        catch-up that covers it, once for all of them."""
        if self._catch_up is not None and any(
            entry.item.inline and entry.error is None for entry in batch
        ):
            self._catch_up(batch[0].batch)

    def _insert(self, appends: Sequence[PendingAppend]) -> list[bool]:
        """Insert the appends in one transaction; which were stale (see
        ``checked_insert``); nothing is written when a version is taken."""
        try:
            return insert_checked(self.recorder, appends)
        except IntegrityError:
            raise ConcurrencyConflict("a stream version is taken already") from None
        except (OperationalError, InterfaceError) as error:
            raise StoreUnavailable(str(error)) from None

    def _write_batch(self, batch: Sequence[Entry[PendingAppend]]) -> None:
        """Insert every caller's events in one transaction; see the module docstring."""
        accepted = _unclaimed(batch)
        if len(accepted) > 1:
            try:
                _mark_stale(accepted, self._insert([entry.item for entry in accepted]))
            except StoreUnavailable as error:
                for entry in accepted:
                    entry.error = StoreUnavailable(str(error))
                return
            except Exception:  # a conflict or a refused event: write each caller apart
                log.info("group_commit.apart callers=%d", len(accepted))
            else:
                return
        for entry in accepted:
            try:
                _mark_stale([entry], self._insert([entry.item]))
            except Exception as error:  # this caller's own outcome, raised in its thread
                entry.error = error

    def append_stored(self, rows: Sequence[tuple[UUID, int, str, bytes]]) -> None:
        """Append already-encoded events as they are (``events import``)."""
        try:
            self.recorder.insert_events([StoredEvent(*row) for row in rows])
        except IntegrityError:
            raise ConcurrencyConflict("a stream version is taken already") from None

    def append_stored_atomically(
        self, chunks: Iterable[Sequence[tuple[UUID, int, str, bytes]]]
    ) -> int:
        """Append every chunk of encoded events in one transaction, all or none
        (``events import``); answer how many. An exception raised by ``chunks`` while
        it is iterated rolls everything back too."""
        recorder = self.recorder
        count = 0
        try:
            if isinstance(recorder, PostgresApplicationRecorder):
                with recorder.datastore.transaction(commit=True) as curs:
                    for chunk in chunks:
                        events = [StoredEvent(*row) for row in chunk]
                        recorder._insert_stored_events(curs, events)
                        count += len(events)
            elif isinstance(recorder, SQLiteApplicationRecorder):
                with recorder.datastore.transaction(commit=True) as cursor:
                    for chunk in chunks:
                        events = [StoredEvent(*row) for row in chunk]
                        recorder._insert_events(cursor, events)
                        count += len(events)
            else:
                raise TypeError(f"no atomic import for {type(recorder).__name__}")
        except IntegrityError:
            raise ConcurrencyConflict("a stream version is taken already") from None
        except (OperationalError, InterfaceError) as error:
            raise StoreUnavailable(str(error)) from None
        return count


def open_recorder(url: DatabaseUrl) -> tuple[ApplicationRecorder, object]:
    """A recorder with its table created, and the datastore to close later."""
    recorder: ApplicationRecorder
    if url.dialect == "sqlite":
        assert url.sqlite_path is not None
        sqlite_store = SQLiteDatastore(
            str(url.sqlite_path), lock_timeout=30, pool_size=4, max_overflow=8
        )
        recorder = SQLiteApplicationRecorder(sqlite_store, events_table_name=EVENTS_TABLE)
        recorder.create_table()
        return recorder, sqlite_store
    pg_store = PostgresDatastore(
        dbname=url.dbname,
        host=url.host,
        port=url.port,
        user=url.user,
        password=url.password,
        schema=url.schema,
        pool_size=4,
        max_overflow=8,
        pre_ping=False,  # selects retry on a dead connection; a write fails once (503)
        lock_timeout=10,
        connect_timeout=10,
    )
    recorder = TypedArrayPostgresRecorder(pg_store, events_table_name=EVENTS_TABLE)
    recorder.create_table()
    return recorder, pg_store
