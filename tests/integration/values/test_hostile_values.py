"""Values that enter the store can be read back and fit their columns, on both backends:
a hostile TenantMember's numbers, lengths, strings and shapes answer 400/422, write
nothing, and leave every other tenant working (docs/fault-isolation.md)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from application import Result, User
from application.app import App
from tests.integration.custom_fields.helpers import all_entities, define, fields_of, set_value
from tests.support.results import failed, ok


def head(app: App) -> int:
    return app.projections.status()[0].head


def other_tenant(tenant: str) -> User:
    return User(id="admin-other", tenant_id=tenant + "-b", roles=frozenset({"TenantAdmin"}))


def still_works(app: App, admin: User) -> None:
    """Another tenant defines, sets and reads back, before and after a catch-up."""
    other = other_tenant(admin.tenant_id)
    ok(define(app, other, "n", "number"))
    ok(set_value(app, other, "e1", "n", 2**53 - 1))
    app.projections.catch_up()
    assert fields_of(app, other, "e1") == {"n": 2**53 - 1}
    assert all(s.quarantined == 0 for s in app.projections.status())


def errors_of(result: Result) -> dict[str, str]:
    details = failed(result, "invalid_payload", 400)
    return {e["path"]: e["message"] for e in details["errors"]}


@pytest.mark.parametrize(
    "value",
    [10**400, -(10**400), 2**53, -(2**53), 2**64, float("inf"), float("-inf"), float("nan")],
    ids=["10**400", "-10**400", "2**53", "-2**53", "2**64", "inf", "-inf", "nan"],
)
def test_a_member_setting_an_unstorable_number_is_refused_and_writes_nothing(
    app: App, admin: User, member: User, value: float
) -> None:
    ok(define(app, admin, "n", "number"))
    before = head(app)
    result = set_value(app, member, "e1", "n", value)
    assert result.error is not None and result.error.status in (400, 422), result
    if result.error.status == 422:
        assert result.error.code == "custom_field_value_invalid"
        assert result.error.details["fieldKey"] == "n"
    else:
        assert "value" in errors_of(result)
    assert head(app) == before
    app.projections.catch_up()
    assert fields_of(app, admin, "e1") is None
    still_works(app, admin)


def test_json_1e999_reads_as_infinity_and_is_refused(app: App, admin: User, member: User) -> None:
    ok(define(app, admin, "n", "number"))
    before = head(app)
    payload = json.loads('{"entityName":"contact","entityId":"e","fieldKey":"n","value":1e999}')
    assert errors_of(app.write("set-custom-field", payload, member)) == {
        "value": "numbers must be finite"
    }
    assert head(app) == before


def test_the_largest_safe_numbers_are_stored_and_read_back_exactly(
    app: App, admin: User, member: User
) -> None:
    ok(define(app, admin, "n", "number"))
    # (PostgreSQL jsonb gives an integral float back as an integer: 1e300 would read
    # back as a 301-digit int, so the extremes here are the safe integers and tiny floats.)
    values = [2**53 - 1, -(2**53 - 1), 1.25e-300, 5e-324, 0.1]
    for i, value in enumerate(values):
        ok(set_value(app, member, f"e{i}", "n", value))
    app.projections.catch_up()
    assert [fields_of(app, admin, f"e{i}") for i in range(len(values))] == [
        {"n": v} for v in values
    ]
    app.projections.rebuild()
    assert fields_of(app, admin, "e2") == {"n": 1.25e-300}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min": float("inf")}, None),
        ({"max": json.loads("1e400")}, None),
        ({"min": 10**400}, "min must lie within ±9007199254740991 when an integer"),
        ({"max": -(2**60)}, "max must lie within ±9007199254740991 when an integer"),
    ],
)
def test_number_bounds_must_be_storable(
    app: App, admin: User, options: dict[str, Any], message: str | None
) -> None:
    before = head(app)
    errors = errors_of(define(app, admin, "n", "number", options=options))
    assert set(errors) <= {"field", "field.min", "field.max"}, errors
    if message is not None:
        assert errors == {"field": message}
    assert head(app) == before
    still_works(app, admin)


@pytest.mark.parametrize("max_length", [2**70, 1_000_001, 0])
def test_max_length_is_bounded(app: App, admin: User, max_length: int) -> None:
    before = head(app)
    assert "field" in errors_of(define(app, admin, "t", options={"maxLength": max_length}))
    assert head(app) == before
    ok(define(app, admin, "t", options={"maxLength": 1_000_000}))


def test_text_values_are_bounded_by_the_setting(
    make_app: Callable[..., App], admin: User, member: User
) -> None:
    app = make_app(max_text_bytes=1000)
    ok(define(app, admin, "t"))
    ok(set_value(app, member, "e1", "t", "é" * 500))  # 1,000 bytes of UTF-8
    before = head(app)
    details = failed(
        set_value(app, member, "e2", "t", "é" * 500 + "x"), "custom_field_value_invalid", 422
    )
    assert (details["fieldKey"], details["issues"]) == ("t", ["longer than 1000 bytes of UTF-8"])
    assert head(app) == before


def test_the_default_text_bound_is_64_kib(app: App, admin: User, member: User) -> None:
    ok(define(app, admin, "t"))
    ok(define(app, admin, "u", "url"))
    ok(set_value(app, member, "e1", "t", "x" * 65536))
    failed(set_value(app, member, "e2", "t", "x" * 65537), "custom_field_value_invalid", 422)
    long_url = "https://example.com/" + "a" * 65536
    failed(set_value(app, member, "e3", "u", long_url), "custom_field_value_invalid", 422)
    app.projections.catch_up()
    assert fields_of(app, admin, "e1") == {"t": "x" * 65536}


@pytest.mark.parametrize(
    "amount",
    ["1" * 31, "0." + "1" * 19, 1e300, 1e-300, "9" * 100_000],
    ids=["31-digits", "19-decimals", "1e300", "1e-300", "100k-digits"],
)
def test_money_amounts_are_bounded(app: App, admin: User, member: User, amount: Any) -> None:
    ok(define(app, admin, "m", "money"))
    before = head(app)
    value = {"amount": amount, "currency": "EUR"}
    failed(set_value(app, member, "e1", "m", value), "custom_field_value_invalid", 422)
    assert head(app) == before
    ok(set_value(app, member, "e2", "m", {"amount": "9" * 30 + "." + "9" * 18, "currency": "EUR"}))


SURROGATE = "\ud800"


@pytest.mark.parametrize(
    ("handler", "payload", "path"),
    [
        ("set-custom-field", {"entityId": "e", "fieldKey": "t", "value": "a" + SURROGATE}, "value"),
        ("set-custom-field", {"entityId": SURROGATE, "fieldKey": "t", "value": "a"}, "entityId"),
        ("set-custom-field", {"entityId": "e", "fieldKey": "t", "value": [SURROGATE]}, "value.0"),
        ("list-entities", {"where": {"t": SURROGATE}}, "where.t"),
        ("list-entities", {"cursor": "abc" + SURROGATE}, "cursor"),
        ("get-entity", {"entityId": "x" + SURROGATE}, "entityId"),
    ],
)
def test_lone_surrogates_anywhere_are_400(
    app: App, admin: User, handler: str, payload: dict[str, Any], path: str
) -> None:
    ok(define(app, admin, "t", searchable=True))
    before = head(app)
    call = app.write if handler == "set-custom-field" else app.query
    errors = errors_of(call(handler, {"entityName": "contact", **payload}, admin))
    assert errors == {path: "strings must be valid Unicode (no lone surrogates)"}
    assert head(app) == before
    still_works(app, admin)


def test_a_surrogate_in_a_key_is_400_with_a_printable_path(app: App, admin: User) -> None:
    payload = {"entityName": "contact", "where": {"t" + SURROGATE: 1}}
    errors = errors_of(app.query("list-entities", payload, admin))
    assert errors == {"where.t\\ud800": "strings must be valid Unicode (no lone surrogates)"}
    json.dumps(errors).encode()  # the answer itself can be sent


def cursor_of(key: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        cursor_of("a\x00b"),
        cursor_of("a\ud800"),
        cursor_of(["x"] * 3),
        cursor_of(["2026-01-01T00:00:00+00:00", "m\x00"]),  # list-messages' own shape
        cursor_of(["2026-01-01T00:00:00+00:00", "m\ud800"]),
        base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode(),
        "A" * 100_000,
    ],
    ids=["nul", "surrogate", "not-a-string", "nul-pair", "surrogate-pair", "deep", "huge"],
)
def test_a_cursor_that_decodes_to_hostile_data_is_400(app: App, admin: User, cursor: str) -> None:
    ok(define(app, admin, "t"))
    ok(set_value(app, admin, "e1", "t", "x"))
    app.projections.catch_up()
    for handler in ("list-entities", "list-messages"):
        payload = {"entityName": "contact", "cursor": cursor}
        if handler == "list-messages":
            payload = {"cursor": cursor}
        result = app.query(handler, payload, admin)
        assert result.error is not None and result.error.status == 400, (handler, result)
    assert len(all_entities(app, admin)) == 1


def test_a_payload_nested_1000_deep_is_400(app: App, admin: User) -> None:
    ok(define(app, admin, "t"))
    before = head(app)
    deep: Any = "x"
    for _ in range(1000):
        deep = [deep]
    errors = errors_of(set_value(app, admin, "e", "t", deep))
    assert list(errors.values()) == ["nested deeper than 32 levels"]
    deep_object: Any = {}
    for _ in range(1000):
        deep_object = {"a": deep_object}
    errors = errors_of(
        app.write(
            "define-tenant-field",
            {**{"entityName": "c", "fieldKey": "k"}, "field": deep_object},
            admin,
        )
    )
    assert list(errors.values()) == ["nested deeper than 32 levels"]
    assert head(app) == before


def test_32_levels_pass_the_boundary(app: App, admin: User) -> None:
    ok(define(app, admin, "t"))
    deep: Any = "x"
    for _ in range(31):
        deep = [deep]  # the payload object is level 1: value is 32 levels deep at most
    result = set_value(app, admin, "e", "t", deep)
    # past the boundary, the field type judges it
    failed(result, "custom_field_value_invalid", 422)


def test_a_2_mib_payload_is_400(app: App, admin: User) -> None:
    ok(define(app, admin, "t"))
    before = head(app)
    for value in (
        "x" * (2 * 1024 * 1024),
        ["x" * 1000] * 2100,
        {str(i): i for i in range(300_000)},
    ):
        assert errors_of(set_value(app, admin, "e", "t", value)) == {
            "(payload)": "larger than 1048576 bytes"
        }
    assert errors_of(app.query("get-entity", {"entityName": "c", "entityId": "x" * 2**21}, admin))
    assert head(app) == before


def test_nul_in_every_kind_of_string_is_400(app: App, admin: User) -> None:
    ok(define(app, admin, "t", searchable=True))
    for handler, payload in [
        ("list-entities", {"entityName": "contact", "where": {"t": "a\x00"}}),
        ("list-entities", {"entityName": "contact", "cursor": "a\x00"}),
        ("get-entity", {"entityName": "contact", "entityId": "\x00"}),
    ]:
        errors = errors_of(app.query(handler, payload, admin))
        assert list(errors.values()) == ["NUL characters are not allowed"]


def test_python_values_that_are_not_json_are_400(app: App, admin: User) -> None:
    ok(define(app, admin, "t"))
    for value in (b"bytes", {1, 2}, object()):
        assert list(errors_of(set_value(app, admin, "e", "t", value)).values()) == [
            "not a JSON value"
        ]
    assert errors_of(set_value(app, admin, "e", "t", {1: "x"})) == {
        "value": "object keys must be strings"
    }


@pytest.mark.parametrize(
    "user",
    [
        User(id="u\x00", tenant_id="t", roles=frozenset({"TenantAdmin"})),
        User(id="u", tenant_id="t\ud800", roles=frozenset({"TenantAdmin"})),
        User(id="u", tenant_id="t", roles=frozenset({"TenantAdmin\x00"})),
    ],
    ids=["nul-id", "surrogate-tenant", "nul-role"],
)
def test_a_caller_with_unstorable_ids_is_400(app: App, user: User) -> None:
    before = head(app)
    payload = {"entityName": "contact", "fieldKey": "n", "field": {"type": "number"}}
    for result in (
        app.write("define-tenant-field", payload, user),
        app.query("list-field-definitions", {}, user),
    ):
        failed(result, "invalid_user", 400)
    assert head(app) == before


def test_a_committed_write_answers_success_whatever_the_inline_catch_up_does(
    make_app: Callable[..., App], admin: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(project_inline=True)
    ok(define(app, admin, "n", "number"))

    def broken_catch_up() -> int:
        raise RuntimeError("a projection step failed after the commit")

    monkeypatch.setattr(app.projections, "catch_up", broken_catch_up)
    before = head(app)
    assert ok(set_value(app, admin, "e1", "n", 5))["value"] == 5
    assert head(app) == before + 1  # committed: a retry would write it twice
    monkeypatch.undo()
    app.projections.catch_up()
    assert fields_of(app, admin, "e1") == {"n": 5}
