"""Domain events <-> stored events. Topics are the events' own stable ``TOPIC`` strings;
state is compact JSON with the class version, upcast on read when it is older.

One JSON library (orjson) writes and reads the state, and every encoded state is decoded
once more and compared before it is written: an event the reader could not give back
exactly (an integer past 64 bits, NaN, a lone surrogate, a UUID or datetime inside a
payload) is refused with ``EventNotStorable`` instead of becoming a poison event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.persistence import StoredEvent

from application.errors import EventNotStorable, UnreadableEvent
from domain.events import DomainEvent, topic_map

_DUMPS_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


class UnknownTopic(LookupError):
    pass


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not a JSON type")


def _same(written: Any, read: Any) -> bool:
    """Whether ``read`` is ``written`` as JSON gives it back (a tuple reads as a list)."""
    if isinstance(written, dict):
        return (
            isinstance(read, dict)
            and written.keys() == read.keys()
            and all(_same(v, read[k]) for k, v in written.items())
        )
    if isinstance(written, list | tuple):
        return (
            isinstance(read, list)
            and len(written) == len(read)
            and all(_same(w, r) for w, r in zip(written, read, strict=True))
        )
    if written is None or isinstance(written, bool):
        return read is written
    for kind in (str, int, float):
        if isinstance(written, kind):
            return isinstance(read, kind) and not isinstance(read, bool) and written == read
    return False


def dumps(state: Mapping[str, Any]) -> bytes:
    """Encode ``state``; raise ``EventNotStorable`` unless it decodes back exactly."""
    try:
        encoded = orjson.dumps(state, default=_refuse, option=_DUMPS_OPTIONS)
    except TypeError as error:  # orjson.JSONEncodeError is a TypeError
        raise EventNotStorable(str(error)) from None
    decoded = orjson.loads(encoded)
    # Plain equality settles the common case at C speed; only a tuple (reads as a list)
    # or a mismatch (NaN reads as null, a UUID as a string) needs the exact walk.
    if decoded != state and not _same(state, decoded):
        raise EventNotStorable("a value does not read back as written (NaN or infinity?)")
    return encoded


def loads(state: bytes) -> Any:
    try:
        return orjson.loads(state)
    except orjson.JSONDecodeError as error:
        raise UnreadableEvent(f"state is not JSON the codec reads: {error}") from None


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
        return dumps(state)

    def decode(
        self, originator_id: UUID | str, version: int, topic: str, state: bytes
    ) -> DomainEvent:
        cls = self.classes.get(topic)
        if cls is None:
            raise UnknownTopic(f"no event class for topic {topic!r}")
        data = loads(state)
        if not isinstance(data, dict):
            raise UnreadableEvent(f"state of {topic} is not a JSON object")
        try:
            stored_version = data.pop("_v", 1)
            if stored_version < cls.CLASS_VERSION:
                data = cls.upcast(data, stored_version)
            data["timestamp"] = datetime.fromisoformat(data["timestamp"])
            data["originator_id"] = (
                originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
            )
        except (LookupError, TypeError, ValueError, AttributeError, ArithmeticError) as error:
            # An upcaster is code run on stored data: whatever it trips on, the event is
            # unreadable (quarantined), never a crash of the reader.
            raise UnreadableEvent(f"{topic}: {type(error).__name__}: {error}") from None
        data["originator_version"] = version
        if data.keys() != self._fields[cls]:
            # Not the class's exact shape: its constructor says why.
            try:
                return cls(**data)
            except (TypeError, ValueError) as error:
                raise UnreadableEvent(f"{topic}: {error}") from None
        # Replaying is the hot path of every rebuild: a frozen dataclass's __init__ sets
        # each field through object.__setattr__; the state came from our own encoder
        # and has exactly the class's fields, so fill the instance directly.
        event = object.__new__(cls)
        event.__dict__.update(data)
        return event
