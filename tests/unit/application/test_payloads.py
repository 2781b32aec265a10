"""Payload parsing: camelCase on the wire, snake_case accepted, strict types, unknown keys
refused, one error per offending field; NUL characters refused everywhere."""

from __future__ import annotations

from typing import Any

import pytest

from application.custom_fields.definitions import DefinitionPayload
from application.custom_fields.list_entities import Payload as ListEntities
from application.custom_fields.set_custom_field import Payload as SetValue
from application.payloads import parse
from application.result import Result

DEFINE = {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}}


def errors_of(result: object) -> dict[str, str]:
    assert isinstance(result, Result) and result.error is not None, result
    assert (result.error.code, result.error.status) == ("invalid_payload", 400)
    return {e["path"]: e["message"] for e in result.error.details["errors"]}


def test_camel_case() -> None:
    parsed = parse(DefinitionPayload, {**DEFINE, "displayOrder": 3, "searchable": True})
    assert isinstance(parsed, DefinitionPayload)
    assert (parsed.entity_name, parsed.field_key, parsed.display_order, parsed.searchable) == (
        "contact",
        "tier",
        3,
        True,
    )
    assert parsed.required is False and parsed.label is None


def test_snake_case_is_accepted_too() -> None:
    parsed = parse(
        DefinitionPayload,
        {
            "entity_name": "contact",
            "field_key": "tier",
            "field": {"type": "text"},
            "display_order": 3,
        },
    )
    assert isinstance(parsed, DefinitionPayload) and parsed.display_order == 3


def test_unknown_keys_are_refused() -> None:
    assert errors_of(parse(DefinitionPayload, {**DEFINE, "colour": "red"})) == {
        "colour": "Extra inputs are not permitted"
    }


def test_every_offending_field_is_reported() -> None:
    found = errors_of(
        parse(
            DefinitionPayload,
            {"entityName": "9lives", "field": "text", "displayOrder": "3", "required": "yes"},
        )
    )
    assert set(found) == {"entityName", "fieldKey", "field", "displayOrder", "required"}


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"displayOrder": "3"}, "displayOrder"),  # strict: no string -> int
        ({"displayOrder": 2.0}, "displayOrder"),
        ({"displayOrder": 10**7}, "displayOrder"),
        ({"searchable": 1}, "searchable"),  # strict: no int -> bool
        ({"required": "true"}, "required"),
        ({"fieldKey": "1tier"}, "fieldKey"),
        ({"fieldKey": "tier.x"}, "fieldKey"),
        ({"fieldKey": "tier\n"}, "fieldKey"),
        ({"fieldKey": "t" * 65}, "fieldKey"),
        ({"fieldKey": ""}, "fieldKey"),
        ({"entityName": "contact list"}, "entityName"),
        ({"label": "x" * 201}, "label"),
        ({"field": ["text"]}, "field"),
    ],
)
def test_field_level_errors(change: dict[str, Any], path: str) -> None:
    assert path in errors_of(parse(DefinitionPayload, {**DEFINE, **change}))


def test_key_limits_are_inclusive() -> None:
    assert isinstance(parse(DefinitionPayload, {**DEFINE, "fieldKey": "t" * 64}), DefinitionPayload)
    assert isinstance(parse(DefinitionPayload, {**DEFINE, "fieldKey": "a-B_9"}), DefinitionPayload)


def test_missing_required_keys() -> None:
    assert set(errors_of(parse(DefinitionPayload, {}))) == {"entityName", "fieldKey", "field"}


@pytest.mark.parametrize("raw", [[], "x", 3, True])
def test_the_payload_must_be_an_object(raw: Any) -> None:
    assert errors_of(parse(DefinitionPayload, raw)) == {"(payload)": "expected a JSON object"}


def test_none_is_an_empty_object() -> None:
    assert set(errors_of(parse(DefinitionPayload, None))) == {"entityName", "fieldKey", "field"}


def test_value_is_passed_through_untouched_for_the_field_type_to_judge() -> None:
    for value in ("42", 42, None, [1, "a"], {"amount": "1", "currency": "EUR"}, True):
        parsed = parse(
            SetValue, {"entityName": "c", "entityId": "e", "fieldKey": "k", "value": value}
        )
        assert isinstance(parsed, SetValue) and parsed.value == value


def test_entity_ids_are_bounded() -> None:
    base = {"entityName": "c", "fieldKey": "k", "value": 1}
    assert "entityId" in errors_of(parse(SetValue, {**base, "entityId": ""}))
    assert "entityId" in errors_of(parse(SetValue, {**base, "entityId": "e" * 201}))
    assert isinstance(parse(SetValue, {**base, "entityId": "e" * 200}), SetValue)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"entityName": "c", "entityId": "e\x00", "fieldKey": "k", "value": 1}, "entityId"),
        ({"entityName": "c", "entityId": "e", "fieldKey": "k", "value": "a\x00b"}, "value"),
        ({"entityName": "c", "entityId": "e", "fieldKey": "k", "value": ["ok", "\x00"]}, "value.1"),
        (
            {
                "entityName": "c",
                "entityId": "e",
                "fieldKey": "k",
                "value": {"amount": "1", "currency": "EU\x00"},
            },
            "value.currency",
        ),
    ],
)
def test_nul_characters_are_refused_with_their_path(raw: dict[str, Any], path: str) -> None:
    # PostgreSQL text and jsonb cannot hold NUL: one such value would stop the projections.
    assert errors_of(parse(SetValue, raw)) == {path: "NUL characters are not allowed"}


def test_nul_in_definition_options_and_labels_is_refused() -> None:
    found = errors_of(
        parse(
            DefinitionPayload,
            {
                **DEFINE,
                "label": "a\x00",
                "field": {"type": "enum", "options": ["x", "\x00"]},
            },
        )
    )
    assert set(found) == {"label", "field.options.1"}


def test_list_entities_defaults() -> None:
    parsed = parse(ListEntities, {"entityName": "contact"})
    assert isinstance(parsed, ListEntities)
    assert (parsed.where, parsed.limit, parsed.cursor) == ({}, 50, None)
