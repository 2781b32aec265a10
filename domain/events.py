"""Event and aggregate base classes — pure: no I/O, no clock, no library.

Every concrete event class declares a stable ``TOPIC`` (never derived from the module
path, so moving a class never breaks stored events) and a ``CLASS_VERSION``. When an
event's shape changes, bump ``CLASS_VERSION`` and add ``upcast_v<N>`` static methods
that turn a stored state dict of version N into version N+1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Self, TypeVar
from uuid import UUID

JSON = Any


@dataclass(frozen=True, kw_only=True)
class DomainEvent:
    originator_id: UUID
    originator_version: int
    timestamp: datetime

    TOPIC: ClassVar[str] = ""
    CLASS_VERSION: ClassVar[int] = 1

    def payload(self) -> dict[str, JSON]:
        """The event's own fields, without the envelope (id, version, timestamp)."""
        names = _PAYLOAD_FIELDS.get(type(self))
        if names is None:  # once per class: ``dataclasses.fields`` costs more than the copy
            names = _PAYLOAD_FIELDS[type(self)] = tuple(
                f.name for f in dataclasses.fields(self) if f.name not in _ENVELOPE
            )
        return {name: getattr(self, name) for name in names}

    @classmethod
    def upcast(cls, state: dict[str, JSON], from_version: int) -> dict[str, JSON]:
        for version in range(from_version, cls.CLASS_VERSION):
            step: Callable[[dict[str, JSON]], dict[str, JSON]] = getattr(cls, f"upcast_v{version}")
            state = step(state)
        return state


_ENVELOPE = frozenset({"originator_id", "originator_version", "timestamp"})
_PAYLOAD_FIELDS: dict[type[DomainEvent], tuple[str, ...]] = {}

E = TypeVar("E", bound=DomainEvent)


class Aggregate:
    """An event-sourced aggregate: state changes only by applying its own events.

    ``version`` is the version of the last applied event; new events get version + 1,
    so two writers that loaded the same version collide in the store (409).
    """

    def __init__(self, aggregate_id: UUID) -> None:
        self.id = aggregate_id
        self.version = 0
        self.pending: list[DomainEvent] = []

    @classmethod
    def replay(cls, aggregate_id: UUID, events: Iterable[DomainEvent]) -> Self:
        aggregate = cls(aggregate_id)
        for event in events:
            aggregate._apply(event)
        return aggregate

    def _trigger(self, event_class: type[E], now: datetime, **fields: JSON) -> E:
        event = event_class(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=now,
            **fields,
        )
        self._apply(event)
        self.pending.append(event)
        return event

    def _apply(self, event: DomainEvent) -> None:
        self.mutate(event)
        self.version = event.originator_version

    def mutate(self, event: DomainEvent) -> None:
        raise NotImplementedError

    def collect(self) -> list[DomainEvent]:
        events, self.pending = self.pending, []
        return events


def topic_map(event_classes: Iterable[type[DomainEvent]]) -> Mapping[str, type[DomainEvent]]:
    """Topic → class, refusing duplicates (two classes claiming one topic is a bug)."""
    table: dict[str, type[DomainEvent]] = {}
    for event_class in event_classes:
        if not event_class.TOPIC:
            raise ValueError(f"{event_class.__name__} has no TOPIC")
        if event_class.TOPIC in table:
            raise ValueError(f"duplicate event topic {event_class.TOPIC}")
        table[event_class.TOPIC] = event_class
    return table
