"""Ports: what the application needs from the outside world, as Protocols.

Adapters in ``infrastructure`` (and read models in ``projections``) implement them;
only the composition root knows which implementation is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable
from uuid import UUID

from domain.events import DomainEvent


class Clock(Protocol):
    def now(self) -> datetime: ...


class EventStore(Protocol):
    def load(self, stream_id: UUID) -> list[DomainEvent]:
        """Every event of one stream, in version order (empty for a new stream)."""
        ...

    def load_many(self, stream_ids: Iterable[UUID]) -> dict[UUID, list[DomainEvent]]:
        """``load`` of several streams in one round trip: each id maps to its events."""
        ...

    def existing(self, stream_ids: Iterable[UUID]) -> set[UUID]:
        """Which of these streams hold any event (one round trip for all of them)."""
        ...

    def append(
        self, events: Sequence[DomainEvent], expected: Mapping[UUID, int] | None = None
    ) -> None:
        """Store all the events atomically, or none: raise ``ConcurrencyConflict``
        when any (stream, version) is taken already. ``expected``: streams the caller
        decided on, each with the version it read (0: none), a stream it writes too
        (an entity it took as new, at 0); raise ``StaleRead`` when any has another
        version inside the write's transaction."""
        ...


class CommitCount(Protocol):
    """A store's group commit, counted: a catch-up that starts after ``committed()``
    read n covers every batch up to n."""

    def committed(self) -> int:
        """Batches written so far."""
        ...

    def committed_by_this_thread(self) -> int:
        """The number of the batch that wrote this thread's last append (0: none)."""
        ...


@runtime_checkable
class GroupCommitted(CommitCount, Protocol):
    """A store whose group commit can run the inline catch-up of a batch in the thread
    that wrote it, before the batch's callers are answered: one catch-up per batch, and
    no caller waits on another thread's."""

    def catch_up_after_batches(self, catch_up: Callable[[int], None]) -> None:
        """Call ``catch_up(batch number)`` after each batch that holds an inline append."""
        ...

    def inline(self) -> AbstractContextManager[None]:
        """Appends of this thread inside the block wait for the read models."""
        ...


@dataclass(frozen=True)
class Recorded:
    """An event with its position in the global log (1-based, gap-free in commit order)."""

    position: int
    event: DomainEvent


@dataclass(frozen=True)
class Unreadable:
    """A stored event the codec cannot decode, in its place in the log."""

    position: int
    topic: str
    tenant_id: str | None
    error: Exception


@dataclass(frozen=True)
class LogPage:
    """Up to ``count`` consecutive positions of the log after some position: the entries
    of the topics asked for (decoded, or ``Unreadable``), and the last position read,
    whatever its topic (the position a reader that consumed the page moves to)."""

    entries: Sequence[Recorded | Unreadable]
    last: int
    count: int


class EventLog(Protocol):
    def read(self, after: int, limit: int) -> Sequence[Recorded]: ...

    def scan(self, after: int, limit: int) -> Sequence[Recorded | Unreadable]:
        """As ``read``, but an event that cannot be decoded takes its place as an
        ``Unreadable`` instead of failing the whole read (the projections quarantine it)."""
        ...

    def page(self, after: int, limit: int, topics: frozenset[str] | None) -> LogPage:
        """As ``scan``, in one round trip, but decoding only the events whose topic is in
        ``topics`` (None: all). A topic the codec does not know is always an entry (an
        ``Unreadable``): nobody can say it is of no interest."""
        ...

    def head(self) -> int:
        """The highest position written so far (0 for an empty log)."""
        ...


Dialect = Literal["sqlite", "postgresql"]


class SqlCursor(Protocol):
    """A DB-API cursor whose statements use ``?`` placeholders on every backend."""

    rowcount: int

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


@runtime_checkable
class CopiesRows(Protocol):
    """A cursor that bulk-loads rows (PostgreSQL ``COPY``), faster than an insert."""

    def copy_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None: ...


class SqlDatabase(Protocol):
    """The read-model database (the same database as the events)."""

    @property
    def dialect(self) -> Dialect: ...

    def transaction(self) -> AbstractContextManager[SqlCursor]:
        """A write transaction that excludes other writers (SQLite: BEGIN IMMEDIATE)."""
        ...

    def reading(self) -> AbstractContextManager[SqlCursor]:
        """A cursor for reads. Each statement sees its own snapshot: use one statement
        per read that must be consistent (a transaction would cost two more round trips
        for every read)."""
        ...


@dataclass(frozen=True)
class ProjectionStatus:
    name: str
    position: int
    head: int
    quarantined: int = 0

    @property
    def lag(self) -> int:
        return max(self.head - self.position, 0)


@dataclass(frozen=True)
class Quarantined:
    """An event a projection could not apply, set aside with its error."""

    projection: str
    position: int
    tenant_id: str | None
    topic: str
    error_class: str
    error_message: str
    quarantined_at: str


RetryOutcome = Literal["applied", "failed", "absent"]


class Progress(Protocol):
    def __call__(self, done: int, total: int) -> None: ...


class Projections(Protocol):
    """The operator's handle on the read models (``app.projections``)."""

    def catch_up(self) -> int: ...

    def rebuild(self, name: str | None = None, progress: Progress | None = None) -> None: ...

    def status(self) -> list[ProjectionStatus]: ...

    def follow(self, stop: Any, interval: float = 0.5) -> Iterator[int]: ...

    def quarantined(self, name: str | None = None, limit: int = 1000) -> list[Quarantined]: ...

    def retry(self, name: str, position: int) -> RetryOutcome:
        """Apply one quarantined event again: ``applied`` (it left the quarantine),
        ``failed`` (still there, with the new error) or ``absent`` (no such event)."""
        ...
