"""Field types: strict value validation (no coercion) and field option checks."""

from __future__ import annotations

from typing import Any

import pytest

from domain.field_types import FIELD_TYPES, FieldSpec, Invalid, check_field_spec, validate_value


def spec(field_type: str, **options: Any) -> FieldSpec:
    return check_field_spec(field_type, options)


def accepted(field_type: str, value: Any, **options: Any) -> Any:
    return validate_value(spec(field_type, **options), value)


def issues(field_type: str, value: Any, **options: Any) -> list[str]:
    with pytest.raises(Invalid) as caught:
        validate_value(spec(field_type, **options), value)
    assert caught.value.issues, "an Invalid must say why"
    return caught.value.issues


def test_there_are_nine_types() -> None:
    assert set(FIELD_TYPES) == {
        "text",
        "number",
        "boolean",
        "date",
        "enum",
        "multi_enum",
        "money",
        "email",
        "url",
    }


# --- values -----------------------------------------------------------------------

VALID = [
    ("text", "hello", {}),
    ("text", "", {}),
    ("text", "abc", {"maxLength": 3}),
    ("text", "žluť", {"maxLength": 4}),
    ("number", 42, {}),
    ("number", -1.5, {}),
    ("number", 0, {"min": 0, "max": 0}),
    ("number", 10, {"min": 1, "max": 10}),
    ("boolean", True, {}),
    ("boolean", False, {}),
    ("date", "2024-02-29", {}),
    ("date", "1999-12-31", {}),
    ("enum", "gold", {"options": ["gold", "silver"]}),
    ("multi_enum", ["a", "c"], {"options": ["a", "b", "c"]}),
    ("multi_enum", [], {"options": ["a"]}),
    ("email", "first.last+tag@example.co.uk", {}),
    ("email", "x@localhost", {}),
    ("url", "https://example.com/path?q=1#frag", {}),
    ("url", "http://127.0.0.1:8080/", {}),
]


@pytest.mark.parametrize(("field_type", "value", "options"), VALID)
def test_valid_values_are_kept_as_given(
    field_type: str, value: Any, options: dict[str, Any]
) -> None:
    assert accepted(field_type, value, **options) == value


INVALID = [
    # text
    ("text", 42, {}),
    ("text", None, {}),
    ("text", ["a"], {}),
    ("text", "abcd", {"maxLength": 3}),
    # number: no coercion
    ("number", "42", {}),
    ("number", True, {}),
    ("number", None, {}),
    ("number", float("nan"), {}),
    ("number", float("inf"), {}),
    ("number", 0, {"min": 1}),
    ("number", 11, {"max": 10}),
    # boolean: no truthiness
    ("boolean", "yes", {}),
    ("boolean", "true", {}),
    ("boolean", 1, {}),
    ("boolean", 0, {}),
    ("boolean", None, {}),
    # date: ISO and a real calendar day
    ("date", "2023-02-30", {}),
    ("date", "2023-02-29", {}),
    ("date", "2023-13-01", {}),
    ("date", "2023-1-01", {}),
    ("date", "20230101", {}),
    ("date", "2023-01-01T00:00:00", {}),
    ("date", "2023-01-01\n", {}),
    ("date", "01/02/2023", {}),
    ("date", 20230101, {}),
    # enum
    ("enum", "bronze", {"options": ["gold", "silver"]}),
    ("enum", "Gold", {"options": ["gold", "silver"]}),
    ("enum", ["gold"], {"options": ["gold", "silver"]}),
    # multi_enum: a list of distinct options
    ("multi_enum", ["a", "a"], {"options": ["a", "b"]}),
    ("multi_enum", ["a", "z"], {"options": ["a", "b"]}),
    ("multi_enum", "a", {"options": ["a", "b"]}),
    ("multi_enum", [1], {"options": ["a", "b"]}),
    # email: an addr-spec
    ("email", "no-at-sign", {}),
    ("email", "@example.com", {}),
    ("email", "a@", {}),
    ("email", "a b@example.com", {}),
    ("email", "Name <a@example.com>", {}),
    ("email", "a@example.com\n", {}),
    ("email", "a@-example.com", {}),
    ("email", "a@" + "x" * 260 + ".com", {}),
    ("email", 5, {}),
    # url: absolute http(s)
    ("url", "example.com", {}),
    ("url", "/relative/path", {}),
    ("url", "ftp://example.com/", {}),
    ("url", "javascript:alert(1)", {}),
    ("url", "mailto:a@example.com", {}),
    ("url", "https://", {}),
    ("url", "http://exa mple.com", {}),
    ("url", "http://exa\nmple.com", {}),
    ("url", "http://example.com/\t", {}),
    ("url", "http://example.com:99999/", {}),
    ("url", 5, {}),
]


@pytest.mark.parametrize(("field_type", "value", "options"), INVALID)
def test_invalid_values_are_refused(field_type: str, value: Any, options: dict[str, Any]) -> None:
    issues(field_type, value, **options)


def test_number_reports_both_bounds_issues_with_their_limits() -> None:
    assert issues("number", 0, min=1) == ["less than min 1"]
    assert issues("number", 11, max=10) == ["greater than max 10"]


def test_multi_enum_reports_every_bad_item_and_duplicates() -> None:
    found = issues("multi_enum", ["z", "a", "a"], options=["a", "b"])
    assert "'z' is not one of the options" in found
    assert "options must be distinct" in found


# --- money ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "canonical"),
    [
        ("12.50", "12.50"),  # a decimal string keeps its scale
        ("0", "0"),
        ("-3.25", "-3.25"),
        (12.5, "12.5"),  # a JSON number becomes a decimal string
        (12, "12"),
        (1e-7, "0.0000001"),  # never an exponent
        (1e20, "100000000000000000000"),
    ],
)
def test_money_amount_becomes_a_canonical_decimal_string(amount: Any, canonical: str) -> None:
    value = {"amount": amount, "currency": "EUR"}
    assert accepted("money", value) == {"amount": canonical, "currency": "EUR"}


@pytest.mark.parametrize(
    "amount",
    [
        "",
        "abc",
        "12,50",
        " 12.5",
        "12.5 ",
        "1_000",
        "1e3",
        "NaN",
        "Infinity",
        "+1",
        "1.",
        ".5",
        True,
        None,
        [1],
        float("nan"),
    ],
)
def test_money_amount_must_be_a_plain_decimal(amount: Any) -> None:
    found = issues("money", {"amount": amount, "currency": "EUR"})
    assert found == ["amount must be a decimal string or a number"]


@pytest.mark.parametrize("currency", ["eur", "EURO", "XXX", "", 978, None])
def test_money_currency_must_be_iso_4217(currency: Any) -> None:
    assert issues("money", {"amount": "1", "currency": currency}) == [
        "currency must be an ISO 4217 code"
    ]


def test_money_currency_must_equal_the_fields_currency() -> None:
    assert (
        accepted("money", {"amount": "1", "currency": "CHF"}, currency="CHF")["currency"] == "CHF"
    )
    assert issues("money", {"amount": "1", "currency": "EUR"}, currency="CHF") == [
        "currency must be CHF"
    ]


def test_money_without_a_field_currency_takes_any_iso_code() -> None:
    assert accepted("money", {"amount": "1", "currency": "JPY"}) == {
        "amount": "1",
        "currency": "JPY",
    }


@pytest.mark.parametrize(
    "value",
    [
        "12.50",
        12.5,
        {"amount": "1"},
        {"currency": "EUR"},
        {"amount": "1", "currency": "EUR", "note": "x"},
        None,
    ],
)
def test_money_must_be_an_object_with_exactly_amount_and_currency(value: Any) -> None:
    issues("money", value)


def test_money_reports_amount_and_currency_together() -> None:
    assert len(issues("money", {"amount": "x", "currency": "x"})) == 2


# --- field options ----------------------------------------------------------------


VALID_OPTIONS = [
    ("text", {}),
    ("text", {"maxLength": 1}),
    ("number", {"min": -1, "max": 1.5}),
    ("number", {"min": 3, "max": 3}),
    ("boolean", {}),
    ("date", {}),
    ("enum", {"options": ["a"]}),
    ("multi_enum", {"options": ["a", "b"]}),
    ("money", {}),
    ("money", {"currency": "EUR"}),
    ("email", {}),
    ("url", {}),
]


@pytest.mark.parametrize(("field_type", "options"), VALID_OPTIONS)
def test_valid_field_options(field_type: str, options: dict[str, Any]) -> None:
    checked = check_field_spec(field_type, options)
    assert checked.type == field_type
    assert checked.to_json() == {"type": field_type, **options}


INVALID_OPTIONS = [
    ("colour", {}, "unknown field type"),
    ("text", {"maxLength": 0}, "maxLength must be a positive integer"),
    ("text", {"maxLength": "10"}, "maxLength must be a positive integer"),
    ("text", {"maxLength": True}, "maxLength must be a positive integer"),
    ("text", {"maxLength": 2.5}, "maxLength must be a positive integer"),
    ("number", {"min": "1"}, "min must be a number"),
    ("number", {"max": False}, "max must be a number"),
    ("number", {"min": 2, "max": 1}, "min must not exceed max"),
    ("enum", {}, "options must be a non-empty list of strings"),
    ("enum", {"options": []}, "options must be a non-empty list of strings"),
    ("enum", {"options": "a,b"}, "options must be a non-empty list of strings"),
    ("enum", {"options": [1, 2]}, "options must be a non-empty list of strings"),
    ("enum", {"options": ["a", "a"]}, "options must be unique"),
    ("multi_enum", {"options": ["a", "b", "a"]}, "options must be unique"),
    ("multi_enum", {}, "options must be a non-empty list of strings"),
    ("money", {"currency": "eur"}, "currency must be an ISO 4217 code"),
    ("boolean", {"maxLength": 3}, "option 'maxLength' does not apply to type boolean"),
    ("text", {"options": ["a"]}, "option 'options' does not apply to type text"),
    ("date", {"min": 1}, "option 'min' does not apply to type date"),
    ("email", {"currency": "EUR"}, "option 'currency' does not apply to type email"),
]


@pytest.mark.parametrize(("field_type", "options", "issue"), INVALID_OPTIONS)
def test_invalid_field_options(field_type: str, options: dict[str, Any], issue: str) -> None:
    with pytest.raises(Invalid) as caught:
        check_field_spec(field_type, options)
    assert any(issue in found for found in caught.value.issues), caught.value.issues


def test_option_check_reports_every_issue_at_once() -> None:
    with pytest.raises(Invalid) as caught:
        check_field_spec("text", {"maxLength": 0, "options": ["a"], "min": 1})
    assert len(caught.value.issues) == 3
