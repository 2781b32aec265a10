"""Loading and saving aggregates through the EventStore port."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from uuid import UUID

from application.errors import ConcurrencyConflict
from application.ports import EventStore
from application.result import Result, version_conflict
from domain.events import Aggregate, DomainEvent

A = TypeVar("A", bound=Aggregate)

ATTEMPTS = 5


def load(store: EventStore, cls: type[A], stream_id: UUID) -> A:
    return cls.replay(stream_id, store.load(stream_id))


def commit(store: EventStore, *aggregates: Aggregate) -> list[DomainEvent]:
    """Append every pending event of the aggregates in one atomic write."""
    events = [event for aggregate in aggregates for event in aggregate.collect()]
    if events:
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
