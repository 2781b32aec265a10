"""The event codec: stable topics, round trips, and upcasting old shapes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import uuid4

import pytest

from application.errors import UnreadableEvent
from domain.all_events import EVENT_CLASSES
from domain.custom_field_values import (
    CustomFieldValueCleared,
    CustomFieldValueExpired,
    CustomFieldValueSet,
)
from domain.events import DomainEvent, topic_map
from domain.field_definition import (
    FieldDefinitionDefined,
    FieldDefinitionDeleted,
    FieldDefinitionUpdated,
    FieldSlotClaimed,
    FieldSlotReleased,
    definition_id,
)
from infrastructure.eventstore.codec import EventCodec, UnknownTopic

NOW = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
REF: dict[str, Any] = {"tenant_id": "t1", "entity_name": "contact", "field_key": "tier"}
SETTINGS: dict[str, Any] = {
    "field": {"type": "money", "currency": "EUR"},
    "field_access": {"write": ["TenantAdmin"]},
    "required": True,
    "searchable": False,
    "display_order": -3,
    "label": "Tarif — žluťoučký",
    "retention": {"keepFor": "18m", "action": "anonymize"},
}


def envelope(version: int = 1) -> dict[str, Any]:
    return {"originator_id": uuid4(), "originator_version": version, "timestamp": NOW}


SAMPLES: list[DomainEvent] = [
    FieldDefinitionDefined(**envelope(), **REF, scope="tenant", generation=1, **SETTINGS),
    FieldDefinitionUpdated(**envelope(2), **REF, generation=1, **SETTINGS),
    FieldDefinitionDeleted(**envelope(3), **REF, scope="system", generation=4),
    FieldSlotClaimed(**envelope(), **REF),
    FieldSlotReleased(**envelope(2), **REF),
    CustomFieldValueSet(
        **envelope(),
        **REF,
        entity_id="c-1",
        definition_id=str(uuid4()),
        generation=2,
        sealed="pii2:t.t1:bm9uY2UgYW5kIGNpcGhlcnRleHQ=",
        digest="ab" * 32,
    ),
    CustomFieldValueSet(
        **envelope(),
        **REF,
        entity_id="c-1",
        definition_id=str(uuid4()),
        generation=1,
        sealed='plain:["a","ü",null,1.5,true]',
        digest='plain:["a","ü",null,1.5,true]',
    ),
    CustomFieldValueCleared(
        **envelope(5), **REF, entity_id="c-1", definition_id=str(uuid4()), generation=2
    ),
    CustomFieldValueExpired(
        **envelope(6),
        **REF,
        entity_id="c-1",
        definition_id=str(uuid4()),
        generation=2,
        action="anonymize",
        set_at=NOW.isoformat(),
        sealed="pii2:t.t1:bm9uY2UgYW5kIGNpcGhlcnRleHQ=",
        digest="cd" * 32,
    ),
    CustomFieldValueExpired(
        **envelope(7),
        **REF,
        entity_id="c-2",
        definition_id=str(uuid4()),
        generation=1,
        action="delete",
        set_at=NOW.isoformat(),
        sealed=None,
        digest=None,
    ),
]


@pytest.fixture
def codec() -> EventCodec:
    return EventCodec(EVENT_CLASSES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_round_trip(codec: EventCodec, event: DomainEvent) -> None:
    stored = codec.encode(event)
    assert stored.topic == event.TOPIC
    assert stored.originator_id == event.originator_id
    assert stored.originator_version == event.originator_version
    decoded = codec.decode(
        stored.originator_id, stored.originator_version, stored.topic, stored.state
    )
    assert decoded == event
    assert type(decoded) is type(event)


def test_decode_accepts_a_string_stream_id(codec: EventCodec) -> None:
    event = SAMPLES[0]
    stored = codec.encode(event)
    decoded = codec.decode(str(event.originator_id), 1, stored.topic, stored.state)
    assert decoded == event


def test_state_is_compact_json_with_the_class_version(codec: EventCodec) -> None:
    state = json.loads(codec.encode(SAMPLES[0]).state)
    assert state["_v"] == 3
    assert state["timestamp"] == NOW.isoformat()
    assert state["label"] == "Tarif — žluťoučký"
    assert "originator_id" not in state and "originator_version" not in state


def test_a_non_utc_timestamp_keeps_its_offset(codec: EventCodec) -> None:
    local = NOW.astimezone(timezone(timedelta(hours=2)))
    event = FieldSlotClaimed(originator_id=uuid4(), originator_version=1, timestamp=local, **REF)
    stored = codec.encode(event)
    decoded = codec.decode(event.originator_id, 1, stored.topic, stored.state)
    assert decoded.timestamp == NOW and decoded.timestamp.utcoffset() == timedelta(hours=2)


def test_topics_are_stable_strings_not_module_paths() -> None:
    # Renaming a module must never break stored events: these strings are the contract.
    assert {
        cls.__name__: cls.TOPIC for cls in EVENT_CLASSES if cls.TOPIC.startswith("tidings.fields.")
    } == {
        "FieldDefinitionDefined": "tidings.fields.FieldDefinitionDefined",
        "FieldDefinitionUpdated": "tidings.fields.FieldDefinitionUpdated",
        "FieldDefinitionDeleted": "tidings.fields.FieldDefinitionDeleted",
        "FieldSlotClaimed": "tidings.fields.FieldSlotClaimed",
        "FieldSlotReleased": "tidings.fields.FieldSlotReleased",
        "CustomFieldValueSet": "tidings.fields.CustomFieldValueSet",
        "CustomFieldValueCleared": "tidings.fields.CustomFieldValueCleared",
        "CustomFieldValueExpired": "tidings.fields.CustomFieldValueExpired",
    }


# A FieldDefinitionDefined as version 1 wrote it: no display_order, no label.
V1_DEFINED = (
    b'{"_v":1,"timestamp":"2023-01-02T03:04:05+00:00","tenant_id":"t1","entity_name":"contact",'
    b'"field_key":"tier","scope":"tenant","generation":1,"field":{"type":"enum",'
    b'"options":["gold","silver"]},"field_access":null,"required":false,"searchable":true}'
)


def test_v1_field_definition_defined_is_upcast(codec: EventCodec) -> None:
    stream = definition_id("t1", "contact", "tier")
    event = codec.decode(stream, 1, FieldDefinitionDefined.TOPIC, V1_DEFINED)
    assert isinstance(event, FieldDefinitionDefined)
    assert event.display_order == 0
    assert event.label == "tier"
    assert event.field == {"type": "enum", "options": ["gold", "silver"]}
    assert event.searchable is True
    assert event.timestamp == datetime(2023, 1, 2, 3, 4, 5, tzinfo=UTC)
    # re-encoded, it is a current-version event
    assert json.loads(codec.encode(event).state)["_v"] == FieldDefinitionDefined.CLASS_VERSION


def test_state_without_a_version_is_read_as_version_1(codec: EventCodec) -> None:
    state = json.loads(V1_DEFINED)
    del state["_v"]
    event = codec.decode(uuid4(), 1, FieldDefinitionDefined.TOPIC, json.dumps(state).encode())
    assert isinstance(event, FieldDefinitionDefined)
    assert event.label == "tier"


def test_unknown_topic(codec: EventCodec) -> None:
    with pytest.raises(UnknownTopic):
        codec.decode(uuid4(), 1, "tidings.nope.Gone", b'{"timestamp":"2024-01-01T00:00:00"}')


def test_two_classes_claiming_one_topic_are_refused() -> None:
    class Twin(FieldSlotClaimed):
        pass

    with pytest.raises(ValueError, match="duplicate event topic"):
        topic_map([FieldSlotClaimed, Twin])


def test_a_class_without_topic_is_refused() -> None:
    class Nameless(DomainEvent):
        pass

    with pytest.raises(ValueError, match="has no TOPIC"):
        topic_map([Nameless])


def test_a_state_not_of_the_class_shape_is_refused_not_half_read() -> None:
    codec = EventCodec(EVENT_CLASSES)
    state = {
        "_v": 1,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "tenant_id": "t",
        "entity_name": "contact",
        "entity_id": "e",
        "field_key": "k",
        "definition_id": "d",
        "generation": 1,
    }
    stream = uuid4()
    event = codec.decode(stream, 3, CustomFieldValueCleared.TOPIC, json.dumps(state).encode())
    assert event == CustomFieldValueCleared(
        originator_id=stream,
        originator_version=3,
        timestamp=event.timestamp,
        tenant_id="t",
        entity_name="contact",
        entity_id="e",
        field_key="k",
        definition_id="d",
        generation=1,
    )
    for broken in ({**state, "surprise": 1}, {k: v for k, v in state.items() if k != "generation"}):
        # named, so that the projections quarantine it and a load answers a failed Result
        with pytest.raises(UnreadableEvent):
            codec.decode(stream, 3, CustomFieldValueCleared.TOPIC, json.dumps(broken).encode())


# A CustomFieldValueSet as version 1 wrote it: the plaintext value, no seal, no digest.
V1_VALUE_SET = (
    b'{"_v":1,"timestamp":"2023-01-02T03:04:05+00:00","tenant_id":"t1","entity_name":"contact",'
    b'"entity_id":"c-1","field_key":"tier","definition_id":"d1","generation":1,'
    b'"value":{"currency":"EUR","amount":"12.50"}}'
)


def test_v1_custom_field_value_set_is_upcast_to_plain_cells(codec: EventCodec) -> None:
    event = codec.decode(uuid4(), 1, CustomFieldValueSet.TOPIC, V1_VALUE_SET)
    assert isinstance(event, CustomFieldValueSet)
    assert event.sealed == 'plain:{"amount":"12.50","currency":"EUR"}'
    assert event.digest == event.sealed
    number = V1_VALUE_SET.replace(b'{"currency":"EUR","amount":"12.50"}', b"3")
    upcast = codec.decode(uuid4(), 1, CustomFieldValueSet.TOPIC, number)
    assert isinstance(upcast, CustomFieldValueSet)
    assert (upcast.sealed, upcast.digest) == ("plain:3", "plain:3.0")
    assert b'"_v":2' in codec.state_of(upcast)
