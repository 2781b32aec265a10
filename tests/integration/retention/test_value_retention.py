"""Retention of custom-field values on both backends: each action and each type's
anonymous form (sealed like any other value), a retention set or changed after values
exist, a value set again starting its clock again, an expiry and a definition's delete
in either order, a shredded tenant, and a rebuild after sweeps giving the same rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from application import User
from application.app import App
from infrastructure import bootstrap as wiring
from tests.integration.custom_fields.helpers import define, delete, fields_of, set_value
from tests.integration.retention.support import (
    MovingClock,
    define_kept,
    expiries,
    on_clock,
    sweep,
    sweeper,
)
from tests.support.results import ok

VALUES: dict[str, tuple[dict[str, Any], Any]] = {
    "text": ({}, "call her back about the contract"),
    "number": ({}, 42),
    "boolean": ({}, True),
    "date": ({}, "1984-06-01"),
    "enum": ({"options": ["gold", "silver"]}, "gold"),
    "multi_enum": ({"options": ["a", "b"]}, ["a", "b"]),
    "money": ({"currency": "EUR"}, {"amount": "12.50", "currency": "EUR"}),
    "email": ({}, "jane.doe@example.com"),
    "url": ({}, "https://example.com/jane"),
}
ANONYMOUS = {
    "text": "[anonymized]",
    "email": "anonymized@invalid",
    "url": "https://anonymized.invalid/",
}


@pytest.fixture
def clock() -> MovingClock:
    return MovingClock()


@pytest.fixture
def app(make_app: Callable[..., App], clock: MovingClock) -> App:
    return on_clock(make_app, clock)


def raw_cells(app: App) -> str:
    """Every stored cell and clock row, as text (to look for plaintext in)."""
    db = wiring.projection_runner(app).db
    with db.reading() as cur:
        cur.execute("SELECT fields FROM cf_entity_values")
        cells = [str(row[0]) for row in cur.fetchall()]
    return "\n".join(cells)


def test_anonymize_gives_each_type_its_anonymous_form_sealed(
    app: App, admin: User, clock: MovingClock
) -> None:
    for field_type, (options, value) in VALUES.items():
        define_kept(app, admin, field_type, field_type, action="anonymize", options=options)
        ok(set_value(app, admin, "c1", field_type, value))
    clock.move(days=29)
    assert sweep(app) == 0
    assert fields_of(app, admin, "c1") == {k: v for k, (_, v) in VALUES.items()}
    clock.move(days=1)
    assert sweep(app) == 9
    assert fields_of(app, admin, "c1") == ANONYMOUS
    stored = raw_cells(app)
    for marker in (*ANONYMOUS.values(), "call her back", "jane.doe"):
        assert marker not in stored  # sealed, like any value
    recorded = expiries(app, admin.tenant_id, ["c1"])
    assert {e.field_key: e.action for e in recorded} == dict.fromkeys(VALUES, "anonymize")
    for event in recorded:
        assert (event.sealed is None) == (event.field_key not in ANONYMOUS)
        assert "anonymized" not in (event.sealed or "")
    clock.move(days=400)
    assert sweep(app) == 0  # an anonymized value never expires again
    assert fields_of(app, admin, "c1") == ANONYMOUS


def test_delete_removes_the_value_and_only_expired_ones(
    app: App, admin: User, clock: MovingClock
) -> None:
    define_kept(app, admin, "note", keep_for="5w")
    ok(define(app, admin, "tier"))  # kept for ever
    ok(set_value(app, admin, "c1", "note", "old"))
    ok(set_value(app, admin, "c1", "tier", "gold"))
    clock.move(days=20)
    ok(set_value(app, admin, "c2", "note", "newer"))
    clock.move(days=15)  # c1's note is 35 days old, c2's 15
    assert sweep(app) == 1
    assert fields_of(app, admin, "c1") == {"tier": "gold"}
    assert fields_of(app, admin, "c2") == {"note": "newer"}
    assert [e.action for e in expiries(app, admin.tenant_id, ["c1", "c2"])] == ["delete"]


def test_a_retention_set_or_changed_applies_to_values_already_stored(
    app: App, admin: User, clock: MovingClock
) -> None:
    ok(define(app, admin, "note"))
    ok(set_value(app, admin, "c1", "note", "kept for ever"))
    clock.move(days=90)
    assert sweep(app) == 0
    update: dict[str, Any] = {
        "entityName": "contact",
        "fieldKey": "note",
        "field": {"type": "text"},
    }
    ok(
        app.write(
            "update-tenant-field",
            {**update, "retention": {"keepFor": "10y", "action": "delete"}},
            admin,
        )
    )
    assert sweep(app) == 0
    ok(
        app.write(
            "update-tenant-field",
            {**update, "retention": {"keepFor": "12w", "action": "anonymize"}},
            admin,
        )
    )
    assert sweep(app) == 1
    assert fields_of(app, admin, "c1") == {"note": "[anonymized]"}
    ok(set_value(app, admin, "c2", "note", "fresh"))
    ok(app.write("update-tenant-field", update, admin))  # retention removed
    clock.move(days=400)
    assert sweep(app) == 0
    assert fields_of(app, admin, "c2") == {"note": "fresh"}


def test_a_value_set_again_before_its_expiry_starts_its_clock_again(
    app: App, admin: User, clock: MovingClock
) -> None:
    define_kept(app, admin, "note", keep_for="30d")
    ok(set_value(app, admin, "c1", "note", "first"))
    clock.move(days=20)
    ok(set_value(app, admin, "c1", "note", "first"))  # the same value, set again
    clock.move(days=20)
    assert sweep(app) == 0
    assert fields_of(app, admin, "c1") == {"note": "first"}
    clock.move(days=10)
    assert sweep(app) == 1
    assert fields_of(app, admin, "c1") == {}


def test_expiry_then_delete_and_redefine(app: App, admin: User, clock: MovingClock) -> None:
    define_kept(app, admin, "note")
    ok(set_value(app, admin, "c1", "note", "secret"))
    clock.move(days=31)
    assert sweep(app) == 1
    ok(delete(app, admin, "note"))
    define_kept(app, admin, "note")
    app.projections.catch_up()
    assert fields_of(app, admin, "c1") == {}
    clock.move(days=31)
    assert sweep(app) == 0
    assert len(expiries(app, admin.tenant_id, ["c1"])) == 1


def test_delete_then_sweep_records_nothing_for_the_dead_generation(
    app: App, admin: User, clock: MovingClock
) -> None:
    define_kept(app, admin, "note")
    ok(set_value(app, admin, "c1", "note", "secret"))
    clock.move(days=31)
    ok(delete(app, admin, "note"))
    assert sweep(app) == 0
    define_kept(app, admin, "note")
    ok(set_value(app, admin, "c2", "note", "new"))
    clock.move(days=31)
    assert sweep(app) == 1  # the new generation's value only
    assert fields_of(app, admin, "c1") is None or fields_of(app, admin, "c1") == {}
    assert expiries(app, admin.tenant_id, ["c1"]) == []
    assert [e.entity_id for e in expiries(app, admin.tenant_id, ["c2"])] == ["c2"]


def test_a_definition_deleted_while_a_sweep_is_planned_is_not_swept(
    app: App, admin: User, clock: MovingClock
) -> None:
    """The read model still shows the definition live (not caught up) when the sweep
    records: the expiry of a dead generation lands nowhere."""
    define_kept(app, admin, "note")
    ok(set_value(app, admin, "c1", "note", "secret"))
    app.projections.catch_up()
    clock.move(days=31)
    ok(delete(app, admin, "note"))  # not projected yet
    report = sweeper(app).run()
    assert report is not None and report.recorded == 1
    app.projections.catch_up()
    define_kept(app, admin, "note")
    app.projections.catch_up()
    assert fields_of(app, admin, "c1") in (None, {})


def test_a_shredded_tenant_value_is_swept_and_stays_unreadable(
    app: App, admin: User, operator: User, clock: MovingClock
) -> None:
    define_kept(app, admin, "note", action="anonymize")
    define_kept(app, admin, "email", "email", keep_for="60d", action="anonymize")
    ok(set_value(app, admin, "c1", "note", "secret"))
    ok(set_value(app, admin, "c1", "email", "jane@example.com"))
    clock.move(days=31)
    assert sweep(app) == 1
    ok(app.write("shred-tenant", {"tenantId": admin.tenant_id}, operator))
    app.projections.catch_up()
    assert fields_of(app, admin, "c1") == {"note": "[erased]", "email": "[erased]"}
    clock.move(days=30)
    assert sweep(app) == 1  # no key to seal the anonymous form under: removed
    assert fields_of(app, admin, "c1") == {"note": "[erased]"}


def test_tenants_are_swept_each_under_their_own_definitions(
    make_app: Callable[..., App], clock: MovingClock, admin: User
) -> None:
    app = on_clock(make_app, clock)
    friend = User(id="f", tenant_id=admin.tenant_id + "-f", roles=frozenset({"TenantAdmin"}))
    define_kept(app, admin, "note", keep_for="30d")
    define_kept(app, friend, "note", keep_for="1y")
    for user in (admin, friend):
        ok(set_value(app, user, "c1", "note", "x"))
    clock.move(days=31)
    app.projections.catch_up()
    report = sweeper(app).run(dry_run=True)
    assert report is not None and report.recorded == 0
    assert dict(report.counts) == {
        ("custom_field_values", admin.tenant_id, "contact.note", "delete"): 1
    }
    assert sweep(app) == 1
    assert fields_of(app, friend, "c1") == {"note": "x"}


def test_a_rebuild_after_sweeps_gives_the_same_rows(
    app: App, admin: User, clock: MovingClock
) -> None:
    define_kept(app, admin, "note", action="anonymize")
    define_kept(app, admin, "score", "number", keep_for="60d")
    for n in range(6):
        ok(set_value(app, admin, f"c{n}", "note", f"n{n}"))
        ok(set_value(app, admin, f"c{n}", "score", n))
        clock.move(days=7)
    assert sweep(app, batch_size=2) > 0
    clock.move(days=20)
    assert sweep(app, batch_size=2) > 0
    before = tables(app)
    app.projections.rebuild()
    assert tables(app) == before


def tables(app: App) -> dict[str, list[tuple[Any, ...]]]:
    db = wiring.projection_runner(app).db
    found: dict[str, list[tuple[Any, ...]]] = {}
    with db.reading() as cur:
        for table, order in (
            ("cf_entity_values", "tenant_id, entity_name, entity_id"),
            ("cf_value_clock", "tenant_id, entity_name, entity_id, field_key"),
            ("cf_definitions", "tenant_id, entity_name, field_key"),
            ("feed_items", "tenant_id, sequence"),
        ):
            cur.execute(f"SELECT * FROM {table} ORDER BY {order}")
            found[table] = [
                tuple(str(v) if not isinstance(v, int) else v for v in row)
                for row in cur.fetchall()
            ]
    return found


def test_a_system_field_retention_sweeps_every_tenants_values(
    app: App, admin: User, operator: User, clock: MovingClock
) -> None:
    friend = User(id="f", tenant_id=admin.tenant_id + "-f", roles=frozenset({"TenantAdmin"}))
    key = "sys" + admin.tenant_id.replace("-", "")
    define_kept(app, operator, key, "email", keep_for="1m", action="anonymize")
    for user in (admin, friend):
        ok(set_value(app, user, "c1", key, "someone@example.com"))
    clock.move(days=31)
    assert sweep(app) == 2
    for user in (admin, friend):
        assert fields_of(app, user, "c1") == {key: "anonymized@invalid"}
