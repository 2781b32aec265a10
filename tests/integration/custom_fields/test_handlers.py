"""Every custom-field handler and query of docs/app-layer.md with its errors, on both
backends."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from application import User
from application.app import App
from tests.integration.custom_fields.helpers import (
    clear,
    define,
    definitions,
    delete,
    fields_of,
    set_value,
)
from tests.support.results import failed, ok


def tenant_user(*roles: str) -> User:
    return User("u-" + uuid.uuid4().hex[:6], "t-" + uuid.uuid4().hex[:8], frozenset(roles))


def test_definition_lifecycle(app: App, admin: User) -> None:
    assert ok(
        define(
            app,
            admin,
            "tier",
            "enum",
            options={"options": ["gold", "silver"]},
            searchable=True,
            displayOrder=2,
            label="Tier",
            required=True,
        )
    ) == {"entityName": "contact", "fieldKey": "tier", "scope": "tenant", "generation": 1}
    app.projections.catch_up()
    assert definitions(app, admin) == [
        {
            "entityName": "contact",
            "fieldKey": "tier",
            "scope": "tenant",
            "field": {"type": "enum", "options": ["gold", "silver"]},
            "required": True,
            "searchable": True,
            "displayOrder": 2,
            "label": "Tier",
        }
    ]

    # update: last write wins, the type stays
    for label in ("First", "Second"):
        ok(
            app.write(
                "update-tenant-field",
                {
                    "entityName": "contact",
                    "fieldKey": "tier",
                    "label": label,
                    "displayOrder": 5,
                    "field": {
                        "type": "enum",
                        "options": ["gold", "silver", "bronze"],
                        "fieldAccess": {"write": ["TenantAdmin"]},
                    },
                },
                admin,
            )
        )
    details = failed(
        app.write(
            "update-tenant-field",
            {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}},
            admin,
        ),
        "field_type_immutable",
        422,
    )
    assert details == {
        "entityName": "contact",
        "fieldKey": "tier",
        "currentType": "enum",
        "requestedType": "text",
    }
    app.projections.catch_up()
    assert definitions(app, admin) == [
        {
            "entityName": "contact",
            "fieldKey": "tier",
            "scope": "tenant",
            "field": {
                "type": "enum",
                "options": ["gold", "silver", "bronze"],
                "fieldAccess": {"write": ["TenantAdmin"]},
            },
            "required": False,
            "searchable": False,
            "displayOrder": 5,
            "label": "Second",
        }
    ]

    # delete, then update/delete answer 404; re-define with another type
    assert ok(delete(app, admin, "tier"))["generation"] == 1
    failed(delete(app, admin, "tier"), "not_found", 404)
    failed(
        app.write(
            "update-tenant-field",
            {
                "entityName": "contact",
                "fieldKey": "tier",
                "field": {"type": "enum", "options": ["a"]},
            },
            admin,
        ),
        "not_found",
        404,
    )
    app.projections.catch_up()
    assert definitions(app, admin) == []
    assert ok(define(app, admin, "tier", "number"))["generation"] == 2
    app.projections.catch_up()
    assert [(d["fieldKey"], d["field"]) for d in definitions(app, admin)] == [
        ("tier", {"type": "number"})
    ]


def test_define_errors(
    make_app: Callable[..., App], admin: User, member: User, operator: User
) -> None:
    app = make_app(field_definition_limit_per_tenant=2)
    ok(define(app, admin, "a"))
    failed(define(app, admin, "a", "number"), "version_conflict", 409)
    ok(define(app, operator, "sys"))
    assert failed(define(app, admin, "sys"), "field_key_reserved", 422) == {
        "entityName": "contact",
        "fieldKey": "sys",
    }
    ok(define(app, admin, "b", entity="deal"))
    assert failed(define(app, admin, "c"), "cap_exceeded", 422) == {
        "capName": "fieldDefinitionsPerTenant",
        "limit": 2,
        "current": 2,
    }
    ok(delete(app, admin, "a"))
    ok(define(app, admin, "c"))
    failed(define(app, member, "d"), "forbidden", 403)
    system_admin_as_tenant_writer = User(
        "s", operator.tenant_id, frozenset({"SystemAdmin", "TenantAdmin"})
    )
    failed(
        app.write(
            "define-tenant-field",
            {"entityName": "contact", "fieldKey": "x", "field": {"type": "text"}},
            system_admin_as_tenant_writer,
        ),
        "system_tenant_not_allowed",
        422,
    )
    errors = failed(
        app.write(
            "define-tenant-field",
            {"entityName": "contact", "fieldKey": "1x", "field": {"type": "nope"}, "extra": 1},
            admin,
        ),
        "invalid_payload",
        400,
    )["errors"]
    assert {e["path"] for e in errors} == {"fieldKey", "extra"}
    app.projections.catch_up()
    assert sorted(d["fieldKey"] for d in definitions(app, admin)) == ["b", "c", "sys"]


def test_system_fields(app: App, admin: User, operator: User) -> None:
    failed(
        app.write(
            "define-system-field",
            {"entityName": "contact", "fieldKey": "vip", "field": {"type": "boolean"}},
            admin,
        ),
        "forbidden",
        403,
    )
    assert ok(define(app, operator, "vip", "boolean"))["scope"] == "system"
    failed(define(app, operator, "vip", "boolean"), "version_conflict", 409)
    other = tenant_user("TenantMember")
    ok(set_value(app, admin, "c1", "vip", True))
    ok(set_value(app, other, "c1", "vip", False))
    app.projections.catch_up()
    for user, expected in ((admin, True), (other, False)):
        assert [(d["fieldKey"], d["scope"]) for d in definitions(app, user)] == [("vip", "system")]
        assert fields_of(app, user, "c1") == {"vip": expected}
    failed(
        app.write("delete-system-field", {"entityName": "contact", "fieldKey": "vip"}, admin),
        "forbidden",
        403,
    )
    failed(delete(app, admin, "vip"), "not_found", 404)  # not the tenant's to delete
    ok(delete(app, operator, "vip"))
    failed(delete(app, operator, "vip"), "not_found", 404)
    app.projections.catch_up()
    assert definitions(app, admin) == []


ALL_TYPES: list[tuple[str, dict[str, Any], Any, Any, Any]] = [
    # type, options, valid value, its stored form, an invalid value
    ("text", {"maxLength": 5}, "hello", "hello", "too long"),
    ("number", {"min": 0}, 2.5, 2.5, "42"),
    ("boolean", {}, False, False, "yes"),
    ("date", {}, "2024-02-29", "2024-02-29", "2023-02-30"),
    ("enum", {"options": ["a", "b"]}, "b", "b", "c"),
    ("multi_enum", {"options": ["a", "b"]}, ["b", "a"], ["b", "a"], ["a", "a"]),
    (
        "money",
        {"currency": "EUR"},
        {"amount": 12.5, "currency": "EUR"},
        {"amount": "12.5", "currency": "EUR"},
        {"amount": "1", "currency": "USD"},
    ),
    ("email", {}, "a@example.com", "a@example.com", "a@"),
    ("url", {}, "https://example.com/x", "https://example.com/x", "ftp://example.com"),
]


def test_values_of_every_type(app: App, admin: User, member: User) -> None:
    for field_type, options, _, _, _ in ALL_TYPES:
        ok(define(app, admin, f"f_{field_type}", field_type, options=options))
    for field_type, _, value, _, invalid in ALL_TYPES:
        ok(set_value(app, member, "c1", f"f_{field_type}", value))
        details = failed(
            set_value(app, member, "c1", f"f_{field_type}", invalid),
            "custom_field_value_invalid",
            422,
        )
        assert details["fieldKey"] == f"f_{field_type}" and details["fieldType"] == field_type
        assert details["issues"]
    app.projections.catch_up()
    assert fields_of(app, member, "c1") == {f"f_{t}": stored for t, _, _, stored, _ in ALL_TYPES}


def test_set_and_clear(app: App, admin: User, member: User) -> None:
    failed(set_value(app, member, "c1", "tier", "x"), "not_found", 404)
    failed(clear(app, member, "c1", "tier"), "not_found", 404)
    ok(define(app, admin, "tier"))
    ok(define(app, admin, "secret", options={"fieldAccess": {"write": ["TenantAdmin"]}}))
    ok(set_value(app, member, "c1", "tier", "gold"))
    assert failed(set_value(app, member, "c1", "secret", "x"), "field_access_denied", 422) == {
        "requiredRoles": ["TenantAdmin"]
    }
    failed(clear(app, member, "c1", "secret"), "field_access_denied", 422)
    ok(set_value(app, admin, "c1", "secret", "s3cr3t"))
    nobody = User("n", admin.tenant_id, frozenset())
    failed(set_value(app, nobody, "c1", "tier", "x"), "forbidden", 403)
    failed(clear(app, nobody, "c1", "tier"), "forbidden", 403)
    app.projections.catch_up()
    assert fields_of(app, member, "c1") == {"tier": "gold", "secret": "s3cr3t"}

    assert ok(clear(app, member, "c1", "tier"))["cleared"] is True
    assert ok(clear(app, member, "c1", "tier"))["cleared"] is False
    assert ok(clear(app, member, "c2", "tier"))["cleared"] is False
    app.projections.catch_up()
    assert fields_of(app, member, "c1") == {"secret": "s3cr3t"}
    assert fields_of(app, member, "c2") is None  # a clear never creates an entity
    ok(set_value(app, member, "c1", "tier", "silver"))
    app.projections.catch_up()
    assert fields_of(app, member, "c1") == {"tier": "silver", "secret": "s3cr3t"}


def test_an_invalid_value_changes_nothing(app: App, admin: User) -> None:
    ok(define(app, admin, "n", "number"))
    ok(set_value(app, admin, "c1", "n", 1))
    app.projections.catch_up()
    head = app.projections.status()[0].head
    failed(set_value(app, admin, "c1", "n", "2"), "custom_field_value_invalid", 422)
    assert app.projections.status()[0].head == head  # no event appended
    app.projections.catch_up()
    assert fields_of(app, admin, "c1") == {"n": 1}


def test_queries(app: App, admin: User, member: User, operator: User) -> None:
    ok(define(app, admin, "zeta", displayOrder=1))
    ok(define(app, admin, "alpha", displayOrder=1))
    ok(define(app, admin, "first", displayOrder=-1))
    ok(define(app, admin, "other", entity="deal"))
    ok(define(app, operator, "sys", displayOrder=1))
    ok(set_value(app, member, "c1", "alpha", "x"))
    app.projections.catch_up()
    assert [(d["entityName"], d["fieldKey"], d["scope"]) for d in definitions(app, member)] == [
        ("contact", "first", "tenant"),
        ("contact", "alpha", "tenant"),
        ("contact", "sys", "system"),
        ("contact", "zeta", "tenant"),
        ("deal", "other", "tenant"),
    ]
    assert [d["fieldKey"] for d in definitions(app, member, "deal")] == ["other"]
    assert definitions(app, member, "nothing") == []
    listed = ok(app.query("list-field-definitions", {}, member))
    assert listed["nextCursor"] is None
    assert ok(app.query("get-entity", {"entityName": "contact", "entityId": "c1"}, member)) == {
        "entityName": "contact",
        "entityId": "c1",
        "customFields": {"alpha": "x"},
    }
    failed(
        app.query("get-entity", {"entityName": "deal", "entityId": "c1"}, member), "not_found", 404
    )
    assert ok(app.query("list-entities", {"entityName": "contact"}, member)) == {
        "items": [{"entityId": "c1", "customFields": {"alpha": "x"}}],
        "nextCursor": None,
    }
    failed(app.query("get-entity", {"entityName": "contact"}, member), "invalid_payload", 400)
    failed(app.query("get-entities", {}, member), "unknown_handler", 404)


def test_configured_roles(make_app: Callable[..., App], admin: User, member: User) -> None:
    app = make_app(field_definition_write_roles="FieldManager", value_write_roles=["Editor"])
    manager = User("fm", admin.tenant_id, frozenset({"FieldManager"}))
    editor = User("ed", admin.tenant_id, frozenset({"Editor"}))
    failed(define(app, admin, "tier"), "forbidden", 403)
    ok(define(app, manager, "tier"))
    failed(set_value(app, admin, "c1", "tier", "x"), "forbidden", 403)
    failed(set_value(app, member, "c1", "tier", "x"), "forbidden", 403)
    ok(set_value(app, editor, "c1", "tier", "x"))
    failed(delete(app, admin, "tier"), "forbidden", 403)
    app.projections.catch_up()
    for reader in (manager, editor, member):
        assert fields_of(app, reader, "c1") == {"tier": "x"}
    ok(delete(app, manager, "tier"))
