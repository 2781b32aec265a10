"""Loading and saving aggregates through the EventStore port."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar
from uuid import UUID

from application.errors import ConcurrencyConflict, UnreadableEvent
from application.ports import EventStore
from application.result import Result, version_conflict
from domain.errors import DomainError
from domain.events import Aggregate, DomainEvent
from domain.field_types import Invalid

A = TypeVar("A", bound=Aggregate)

ATTEMPTS = 5


def load(store: EventStore, cls: type[A], stream_id: UUID) -> A:
    return replay(cls, stream_id, store.load(stream_id))


def replay(cls: type[A], stream_id: UUID, events: list[DomainEvent]) -> A:
    """The aggregate from its stream's events (those of ``store.load_many``, say)."""
    try:
        return cls.replay(stream_id, events)
    except (DomainError, Invalid, LookupError, TypeError, ValueError) as error:
        # An event that decodes but does not replay (an imported one of the wrong
        # shape): the stream is unreadable, which fails its own callers only.
        raise UnreadableEvent(f"{cls.__name__} {stream_id}: {type(error).__name__}") from error


def commit(
    store: EventStore, *aggregates: Aggregate, expected: Mapping[UUID, int] | None = None
) -> list[DomainEvent]:
    """Append every pending event of the aggregates in one atomic write (``expected``:
    as ``EventStore.append``'s)."""
    events = [event for aggregate in aggregates for event in aggregate.collect()]
    if events and expected:
        store.append(events, expected)
    elif events:
        store.append(events)
    return events


def retrying(attempt: Callable[[], Result]) -> Result:
    """Run a load-decide-commit attempt again when another writer got there first.

    Each attempt reloads its aggregates, so a rerun decides on fresh state (a define
    that lost the race sees the winner's definition and answers 409 itself).
    """
    for _ in range(ATTEMPTS):
        try:
            return attempt()
        except ConcurrencyConflict:
            continue
    return version_conflict()
