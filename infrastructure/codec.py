"""Domain events <-> stored events. Topics are the events' own stable ``TOPIC`` strings;
state is compact JSON with the class version, upcast on read when it is older."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from domain.events import DomainEvent, topic_map


class UnknownTopic(LookupError):
    pass


class EventCodec:
    def __init__(self, event_classes: Iterable[type[DomainEvent]]) -> None:
        self.classes: Mapping[str, type[DomainEvent]] = topic_map(event_classes)

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
        data: dict[str, Any] = json.loads(state)
        stored_version = data.pop("_v", 1)
        if stored_version < cls.CLASS_VERSION:
            data = cls.upcast(data, stored_version)
        timestamp = datetime.fromisoformat(data.pop("timestamp"))
        stream = originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
        return cls(originator_id=stream, originator_version=version, timestamp=timestamp, **data)
