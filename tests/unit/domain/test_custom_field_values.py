"""EntityCustomFields, given events / when command / then events: clear semantics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from domain.custom_field_values import (
    CustomFieldValueCleared,
    CustomFieldValueSet,
    EntityCustomFields,
    entity_stream_id,
)
from domain.field_definition import definition_id
from tests.unit.domain.scenario import NOW, given, history, shape, when

STREAM = entity_stream_id("t1", "contact", "c1")
TIER = definition_id("t1", "contact", "tier")
SYSTEM_TIER = definition_id("system", "contact", "tier")
Command = Callable[[EntityCustomFields], object]
WHERE = {"tenant_id": "t1", "entity_name": "contact", "entity_id": "c1", "field_key": "tier"}


def set_value(value: Any, generation: int = 1, definition: UUID = TIER) -> Command:
    return lambda e: e.set_value(
        **WHERE,
        definition_id=definition,
        generation=generation,
        sealed=value,
        digest="d-" + value,
        now=NOW,
    )


def clear(generation: int = 1, definition: UUID = TIER) -> Command:
    return lambda e: e.clear_value(
        **WHERE, definition_id=definition, generation=generation, now=NOW
    )


def test_set_records_definition_and_generation() -> None:
    events = when(given(EntityCustomFields, STREAM), set_value("gold", generation=3))
    assert [shape(e) for e in events] == [
        (
            "CustomFieldValueSet",
            1,
            {
                **WHERE,
                "definition_id": str(TIER),
                "generation": 3,
                "sealed": "gold",
                "digest": "d-gold",
            },
        )
    ]


def test_clear_a_live_value() -> None:
    entity = given(EntityCustomFields, STREAM, history(EntityCustomFields, STREAM, set_value("a")))
    cleared: list[object] = []
    events = when(entity, lambda e: cleared.append(clear()(e)))
    assert cleared == [True]
    assert [shape(e) for e in events] == [
        (
            "CustomFieldValueCleared",
            2,
            {**WHERE, "definition_id": str(TIER), "generation": 1},
        )
    ]


def test_clear_without_a_value_emits_nothing() -> None:
    entity = given(EntityCustomFields, STREAM)
    assert entity.clear_value(**WHERE, definition_id=TIER, generation=1, now=NOW) is False
    assert entity.collect() == []


def test_clear_twice_emits_once() -> None:
    past = history(EntityCustomFields, STREAM, set_value("a"), clear())
    entity = given(EntityCustomFields, STREAM, past)
    assert entity.clear_value(**WHERE, definition_id=TIER, generation=1, now=NOW) is False
    assert entity.collect() == []


def test_clear_does_not_touch_a_value_of_an_earlier_generation() -> None:
    # The value was written under generation 1; the key was deleted and re-defined since.
    entity = given(EntityCustomFields, STREAM, history(EntityCustomFields, STREAM, set_value("a")))
    assert entity.clear_value(**WHERE, definition_id=TIER, generation=2, now=NOW) is False
    assert entity.collect() == []


def test_clear_does_not_touch_a_value_of_another_definition() -> None:
    past = history(EntityCustomFields, STREAM, set_value("a", definition=SYSTEM_TIER))
    entity = given(EntityCustomFields, STREAM, past)
    assert entity.clear_value(**WHERE, definition_id=TIER, generation=1, now=NOW) is False


def test_a_stale_value_stored_after_the_live_one_does_not_hide_it_from_clear() -> None:
    # A racing writer validated against generation 1 and committed after generation 2's
    # value: the live value must still be clearable.
    past = history(
        EntityCustomFields,
        STREAM,
        set_value("live", generation=2),
        set_value("stale", generation=1),
    )
    entity = given(EntityCustomFields, STREAM, past)
    events = when(entity, clear(generation=2))
    assert [(type(e), e.payload()["generation"]) for e in events] == [(CustomFieldValueCleared, 2)]


def test_set_after_clear_sets_again() -> None:
    past = history(EntityCustomFields, STREAM, set_value("a"), clear())
    entity = given(EntityCustomFields, STREAM, past)
    events = when(entity, set_value("b"))
    assert [type(e) for e in events] == [CustomFieldValueSet]
    assert events[0].originator_version == 3
    assert entity.clear_value(**WHERE, definition_id=TIER, generation=1, now=NOW) is True
