"""The codec never writes an event it cannot decode: every event class round-trips
exactly with extreme-but-valid values, and what could not is refused before writing."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal
from uuid import UUID, uuid4

import pytest

from application.errors import EventNotStorable, UnreadableEvent
from domain.all_events import EVENT_CLASSES
from domain.custom_field_values import CustomFieldValueSet
from domain.events import DomainEvent
from domain.field_definition import FieldDefinitionDefined
from infrastructure.eventstore.codec import EventCodec

TEXTS = ["", 'ž\U0001f600\u2028\u2029"\\/\t\n\x7f\ufeff', "x" * 70_000]
NUMBERS: list[Any] = [0, -1, 2**53 - 1, 2**63 - 1, -(2**63), 2**64 - 1]
FLOATS: list[Any] = [1.7976931348623157e308, -1.7976931348623157e308, 5e-324, -0.0, 0.1, 1e16]


def deep(levels: int) -> Any:
    value: Any = {"leaf": TEXTS[1]}
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


JSON_VALUE: dict[str, Any] = {
    "texts": TEXTS,
    "numbers": NUMBERS,
    "floats": FLOATS,
    "flags": [True, False, None],
    "empty": [{}, [], ""],
    "deep": deep(40),
    TEXTS[1]: "key with every escape",
}


def extreme(hint: Any, variant: int) -> Any:
    origin = typing.get_origin(hint)
    if hint is str:
        return TEXTS[variant % len(TEXTS)]
    if hint is bool:
        return variant % 2 == 0
    if hint is int:
        return NUMBERS[variant % len(NUMBERS)]
    if origin is Literal:
        args = typing.get_args(hint)
        return args[variant % len(args)]
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if variant % 2 else extreme(options[0], variant)
    if origin is list:
        (item,) = typing.get_args(hint)
        return [extreme(item, variant + i) for i in range(3)]
    if origin is dict or hint is Any:
        return JSON_VALUE if variant % 2 == 0 else {"value": FLOATS[variant % len(FLOATS)]}
    raise AssertionError(f"no extreme value for {hint!r}")


def samples(cls: type[DomainEvent]) -> list[DomainEvent]:
    hints = typing.get_type_hints(cls)
    own = [f.name for f in dataclasses.fields(cls) if f.name not in _ENVELOPE]
    timestamps = [
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=-23, minutes=-59))),
    ]
    return [
        cls(
            originator_id=uuid4(),
            originator_version=2**63 - 1 if variant else 1,
            timestamp=timestamps[variant],
            **{name: extreme(hints[name], variant) for name in own},
        )
        for variant in (0, 1)
    ]


_ENVELOPE = {"originator_id", "originator_version", "timestamp"}


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_every_event_class_round_trips_exactly_with_extreme_values(
    cls: type[DomainEvent],
) -> None:
    codec = EventCodec(EVENT_CLASSES)
    for event in samples(cls):
        stored = codec.encode(event)
        decoded = codec.decode(
            stored.originator_id, stored.originator_version, stored.topic, stored.state
        )
        assert decoded == event
        assert type(decoded) is cls
        assert decoded.timestamp.utcoffset() == event.timestamp.utcoffset()
        assert codec.encode(decoded).state == stored.state  # stable bytes
        assert json.loads(stored.state)["_v"] == cls.CLASS_VERSION  # plain JSON for jsonl


def value_event(value: Any) -> FieldDefinitionDefined:
    """An event carrying ``value`` where a caller's JSON lands (a field spec's bound)."""
    return FieldDefinitionDefined(
        originator_id=uuid4(),
        originator_version=1,
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        tenant_id="t",
        entity_name="contact",
        field_key="k",
        scope="tenant",
        generation=1,
        field={"type": "number", "max": value},
        field_access=None,
        required=False,
        searchable=False,
        display_order=0,
        label="k",
        retention=None,
    )


@pytest.mark.parametrize(
    "value",
    [
        10**400,
        2**64,
        -(2**63) - 1,
        float("nan"),
        float("inf"),
        "\ud800",
        {"\udfff": 1},
        {1: "non-string key"},
        UUID(int=1),
        datetime(2026, 1, 1),
        b"bytes",
        deep(300),
    ],
    ids=lambda v: type(v).__name__,
)
def test_a_value_that_would_not_read_back_is_refused_before_writing(value: Any) -> None:
    with pytest.raises(EventNotStorable):
        EventCodec(EVENT_CLASSES).encode(value_event(value))


@pytest.mark.parametrize("literal", [b"1" + b"0" * 400, b"1e999", b"NaN", b'"\\ud800"', b"-1e400"])
def test_a_state_an_older_encoder_wrote_is_unreadable_not_a_crash(literal: bytes) -> None:
    event = value_event(1)
    state = EventCodec.state_of(event).replace(b'"max":1', b'"max":' + literal)
    with pytest.raises(UnreadableEvent):
        EventCodec(EVENT_CLASSES).decode(event.originator_id, 1, event.TOPIC, state)


@pytest.mark.parametrize("state", [b"[]", b"not json", b'{"_v":1}', b'{"_v":1,"timestamp":3}'])
def test_states_of_the_wrong_shape_are_unreadable(state: bytes) -> None:
    with pytest.raises(UnreadableEvent):
        EventCodec(EVENT_CLASSES).decode(uuid4(), 1, CustomFieldValueSet.TOPIC, state)
