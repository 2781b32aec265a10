"""Retention: keepFor's grammar and bounds, the calendar cutoff, each type's anonymous
form, and expiry on the entity's stream (given events / when command / then events)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from domain.custom_field_values import (
    CustomFieldValueExpired,
    EntityCustomFields,
    entity_stream_id,
)
from domain.field_definition import definition_id
from domain.field_types import (
    FIELD_TYPES,
    FieldSpec,
    anonymous_value,
    check_field_spec,
    validate_value,
)
from domain.retention import InvalidRetention, Retention, micros, months_before
from tests.unit.domain.scenario import NOW, given, shape, when

STREAM = entity_stream_id("t1", "contact", "c1")
NOTE = definition_id("t1", "contact", "note")
WHERE = {"tenant_id": "t1", "entity_name": "contact", "entity_id": "c1", "field_key": "note"}


@pytest.mark.parametrize(
    "keep_for", ["30d", "3650d", "5w", "521w", "1m", "18m", "120m", "1y", "10y"]
)
def test_keep_for_within_30_days_and_10_years(keep_for: str) -> None:
    assert Retention(keep_for=keep_for, action="delete").keep_for == keep_for


@pytest.mark.parametrize(
    "keep_for",
    [
        "29d",
        "3651d",
        "4w",
        "522w",
        "0m",
        "121m",
        "0y",
        "11y",
        "30",
        "d",
        "30D",
        "030d",
        " 30d",
        "30d ",
        "1.5y",
        "-1y",
        "99999d",
        "",
        30,
    ],
)
def test_keep_for_out_of_bounds_or_malformed_is_refused(keep_for: Any) -> None:
    with pytest.raises(InvalidRetention):
        Retention(keep_for=keep_for, action="delete")


def test_action_is_delete_or_anonymize() -> None:
    with pytest.raises(InvalidRetention):
        Retention(keep_for="30d", action="shred")  # type: ignore[arg-type]


def test_cutoff_days_and_weeks() -> None:
    assert Retention(keep_for="30d", action="delete").cutoff(NOW) == NOW - timedelta(days=30)
    assert Retention(keep_for="12w", action="delete").cutoff(NOW) == NOW - timedelta(weeks=12)


def test_cutoff_months_and_years_on_the_calendar() -> None:
    march_31 = datetime(2024, 3, 31, 8, 0, tzinfo=UTC)
    assert months_before(march_31, 1) == datetime(2024, 2, 29, 8, 0, tzinfo=UTC)
    assert Retention(keep_for="18m", action="delete").cutoff(march_31) == datetime(
        2022, 9, 30, 8, 0, tzinfo=UTC
    )
    assert Retention(keep_for="10y", action="delete").cutoff(
        datetime(2024, 2, 29, tzinfo=UTC)
    ) == datetime(2014, 2, 28, tzinfo=UTC)


def test_round_trip_through_an_event() -> None:
    retention = Retention(keep_for="18m", action="anonymize")
    assert Retention.from_json(retention.to_json()) == retention
    assert Retention.from_json(None) is None
    with pytest.raises(InvalidRetention):
        Retention.from_json({"keepFor": "18m"})


def test_micros_is_exact() -> None:
    assert micros(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    moment = datetime(2024, 5, 1, 12, 0, 0, 123457, tzinfo=UTC)
    assert micros(moment) == 1714564800123457


# --- each type's anonymous form ------------------------------------------------------

SPECS: dict[str, dict[str, Any]] = {
    "text": {},
    "number": {"min": 0},
    "boolean": {},
    "date": {},
    "enum": {"options": ["a", "b"]},
    "multi_enum": {"options": ["a", "b"]},
    "money": {"currency": "EUR"},
    "email": {},
    "url": {},
}
EXPECTED = {
    "text": "[anonymized]",
    "number": None,
    "boolean": None,
    "date": None,
    "enum": None,
    "multi_enum": None,
    "money": None,
    "email": "anonymized@invalid",
    "url": "https://anonymized.invalid/",
}


@pytest.mark.parametrize("field_type", FIELD_TYPES)
def test_each_type_has_an_anonymous_form_its_own_validation_accepts(field_type: str) -> None:
    spec = check_field_spec(field_type, SPECS[field_type])
    form = anonymous_value(spec)
    assert form == EXPECTED[field_type]
    if form is not None:
        assert validate_value(spec, form) == form


def test_text_too_short_for_the_marker_is_cleared() -> None:
    assert anonymous_value(FieldSpec(type="text", options={"maxLength": 5})) is None
    assert anonymous_value(FieldSpec(type="text", options={"maxLength": 12})) == "[anonymized]"


# --- expiry on the entity's stream ---------------------------------------------------


def entity_with_note(set_at: datetime) -> EntityCustomFields:
    entity = given(EntityCustomFields, STREAM)
    entity.set_value(
        **WHERE, definition_id=NOTE, generation=1, sealed="tok", digest="dig", now=set_at
    )
    entity.collect()
    return entity


def expire(
    entity: EntityCustomFields, action: str, cutoff: datetime, anonymous: Any = None
) -> bool:
    return entity.expire_value(
        **WHERE,
        definition_id=NOTE,
        generation=1,
        action=action,
        cutoff=cutoff,
        anonymous=anonymous,
        now=NOW,
    )


def test_delete_expiry_removes_the_value() -> None:
    set_at = NOW - timedelta(days=40)
    entity = entity_with_note(set_at)
    events = when(entity, lambda e: expire(e, "delete", NOW - timedelta(days=30)))
    assert [shape(e) for e in events] == [
        (
            "CustomFieldValueExpired",
            2,
            {
                **WHERE,
                "definition_id": str(NOTE),
                "generation": 1,
                "action": "delete",
                "set_at": set_at.isoformat(),
                "sealed": None,
                "digest": None,
            },
        )
    ]
    assert entity.values == {} and entity.set_at == {}


def test_anonymize_keeps_the_sealed_form_which_never_expires_again() -> None:
    entity = entity_with_note(NOW - timedelta(days=40))
    events = when(entity, lambda e: expire(e, "anonymize", NOW, ("anon-tok", "anon-dig")))
    assert isinstance(events[0], CustomFieldValueExpired)
    assert (events[0].sealed, events[0].digest) == ("anon-tok", "anon-dig")
    assert entity.values == {("note", str(NOTE), 1): "anon-tok"}
    assert when(entity, lambda e: expire(e, "anonymize", NOW, ("x", "y"))) == []


def test_anonymize_without_a_form_removes_the_value() -> None:
    entity = entity_with_note(NOW - timedelta(days=40))
    events = when(entity, lambda e: expire(e, "anonymize", NOW, None))
    assert isinstance(events[0], CustomFieldValueExpired) and events[0].sealed is None
    assert entity.values == {}


def test_an_expiry_is_recorded_once() -> None:
    entity = entity_with_note(NOW - timedelta(days=40))
    assert when(entity, lambda e: expire(e, "delete", NOW)) != []
    assert when(entity, lambda e: expire(e, "delete", NOW)) == []


def test_a_value_set_after_the_cutoff_is_kept() -> None:
    entity = entity_with_note(NOW - timedelta(days=10))
    assert when(entity, lambda e: expire(e, "delete", NOW - timedelta(days=30))) == []
    assert ("note", str(NOTE), 1) in entity.values


def test_a_value_set_again_starts_its_clock_again() -> None:
    entity = entity_with_note(NOW - timedelta(days=40))
    entity.set_value(**WHERE, definition_id=NOTE, generation=1, sealed="t2", digest="d2", now=NOW)
    entity.collect()
    assert when(entity, lambda e: expire(e, "delete", NOW - timedelta(days=30))) == []


def test_a_value_of_another_generation_is_not_expired() -> None:
    entity = entity_with_note(NOW - timedelta(days=40))
    assert (
        entity.expire_value(
            **WHERE,
            definition_id=NOTE,
            generation=2,
            action="delete",
            cutoff=NOW,
            anonymous=None,
            now=NOW,
        )
        is False
    )
