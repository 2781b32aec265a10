"""Field-type rules that keep every accepted value storable and readable back exactly:
finite numbers, safe integers, bounded lengths and amounts."""

from __future__ import annotations

from typing import Any

import pytest

from domain.field_types import (
    MAX_MAX_LENGTH,
    MAX_SAFE_INTEGER,
    MAX_TEXT_BYTES,
    FieldSpec,
    Invalid,
    check_field_spec,
    validate_value,
)

NUMBER = FieldSpec("number", {})


@pytest.mark.parametrize("value", [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 1e308, -5e-324, 0.0])
def test_safe_numbers_pass(value: float) -> None:
    assert validate_value(NUMBER, value) == value


@pytest.mark.parametrize(
    ("value", "issue"),
    [
        (MAX_SAFE_INTEGER + 1, "the value must lie within ±9007199254740991 when an integer"),
        (-(10**400), "the value must lie within ±9007199254740991 when an integer"),
        (float("inf"), "the value must be a finite number"),
        (float("nan"), "the value must be a finite number"),
        (True, "expected a number"),
    ],
)
def test_unsafe_numbers_are_refused(value: Any, issue: str) -> None:
    with pytest.raises(Invalid) as refused:
        validate_value(NUMBER, value)
    assert refused.value.issues == [issue]


@pytest.mark.parametrize(
    ("options", "issue"),
    [
        ({"min": 10**400}, "min must lie within ±9007199254740991 when an integer"),
        ({"max": float("-inf")}, "max must be a finite number"),
        ({"min": float("nan"), "max": 1}, "min must be a finite number"),
    ],
)
def test_number_bounds_must_be_safe(options: dict[str, Any], issue: str) -> None:
    with pytest.raises(Invalid) as refused:
        check_field_spec("number", options)
    assert refused.value.issues == [issue]


def test_max_length_is_at_most_a_million() -> None:
    assert check_field_spec("text", {"maxLength": MAX_MAX_LENGTH}).options["maxLength"] == 10**6
    for too_long in (MAX_MAX_LENGTH + 1, 2**70):
        with pytest.raises(Invalid) as refused:
            check_field_spec("text", {"maxLength": too_long})
        assert refused.value.issues == ["maxLength must be at most 1000000"]


def test_text_is_bounded_in_utf8_bytes() -> None:
    text = FieldSpec("text", {})
    assert validate_value(text, "x" * MAX_TEXT_BYTES) == "x" * MAX_TEXT_BYTES
    assert validate_value(text, "€" * 3, max_text_bytes=9) == "€€€"
    with pytest.raises(Invalid, match="longer than 8 bytes of UTF-8"):
        validate_value(text, "€" * 3, max_text_bytes=8)
    with pytest.raises(Invalid, match="longer than 65536 bytes"):
        validate_value(text, "x" * (MAX_TEXT_BYTES + 1))
    with pytest.raises(Invalid, match="longer than 100 bytes"):
        validate_value(FieldSpec("url", {}), "https://e.com/" + "a" * 100, max_text_bytes=100)


@pytest.mark.parametrize(
    "amount",
    ["9" * 31, "1" + "0" * 30, "0." + "0" * 18 + "1", 1e30, 1e-19, "1" * 65],
)
def test_money_amounts_are_bounded(amount: Any) -> None:
    with pytest.raises(Invalid) as refused:
        validate_value(FieldSpec("money", {}), {"amount": amount, "currency": "EUR"})
    assert len(refused.value.issues) == 1


def test_the_largest_money_amount_keeps_every_digit() -> None:
    amount = "-" + "9" * 30 + "." + "9" * 18
    assert validate_value(FieldSpec("money", {}), {"amount": amount, "currency": "EUR"}) == {
        "amount": amount,
        "currency": "EUR",
    }
