"""Given-events / when-command / then-events for aggregates, without a store."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID

from domain.events import Aggregate, DomainEvent

A = TypeVar("A", bound=Aggregate)

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def given(cls: type[A], stream: UUID, events: Sequence[DomainEvent] = ()) -> A:
    return cls.replay(stream, events)


def when(aggregate: A, command: Callable[[A], Any]) -> list[DomainEvent]:
    """Run a command; the events it raised are the outcome (and are cleared)."""
    command(aggregate)
    return aggregate.collect()


def history(cls: type[A], stream: UUID, *commands: Callable[[A], Any]) -> list[DomainEvent]:
    """The events a sequence of commands produces on a fresh stream."""
    aggregate = cls(stream)
    events: list[DomainEvent] = []
    for command in commands:
        events += when(aggregate, command)
    return events


def shape(event: DomainEvent) -> tuple[str, int, dict[str, Any]]:
    """What a then-assertion compares: class, version and payload."""
    return type(event).__name__, event.originator_version, event.payload()
