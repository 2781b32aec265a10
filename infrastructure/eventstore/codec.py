"""Domain events <-> stored events. Topics are the events' own stable ``TOPIC`` strings;
state is compact JSON with the class version, upcast on read when it is older."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import StoredEvent

from domain.events import DomainEvent, topic_map


class UnknownTopic(LookupError):
    pass


class EventCodec:
    def __init__(self, event_classes: Iterable[type[DomainEvent]]) -> None:
        self.classes: Mapping[str, type[DomainEvent]] = topic_map(event_classes)
        self._fields = {
            cls: {f.name for f in dataclasses.fields(cls)} for cls in self.classes.values()
        }

    def encode(self, event: DomainEvent) -> StoredEvent:
        return StoredEvent(
            originator_id=event.originator_id,
            originator_version=event.originator_version,
            topic=event.TOPIC,
            state=self.state_of(event),
        )

    @staticmethod
    def state_of(event: DomainEvent) -> bytes:
        state = {
            "_v": event.CLASS_VERSION,
            "timestamp": event.timestamp.isoformat(),
            **event.payload(),
        }
        return json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode()

    def decode(
        self, originator_id: UUID | str, version: int, topic: str, state: bytes
    ) -> DomainEvent:
        cls = self.classes.get(topic)
        if cls is None:
            raise UnknownTopic(f"no event class for topic {topic!r}")
        data: dict[str, Any] = orjson.loads(state)
        stored_version = data.pop("_v", 1)
        if stored_version < cls.CLASS_VERSION:
            data = cls.upcast(data, stored_version)
        data["timestamp"] = datetime.fromisoformat(data["timestamp"])
        data["originator_id"] = (
            originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
        )
        data["originator_version"] = version
        if data.keys() != self._fields[cls]:
            return cls(**data)  # not the class's exact shape: let its constructor say why
        # Replaying is the hot path of every rebuild: a frozen dataclass's __init__ sets
        # each field through object.__setattr__; the state came from our own encoder
        # and has exactly the class's fields, so fill the instance directly.
        event = object.__new__(cls)
        event.__dict__.update(data)
        return event
