"""The upgrade path on both backends: a custom-fields read model made before retention
(no value clock, no retention columns) is rebuilt from the log at the next start-up,
logged, so values stored before the upgrade expire under a retention set after it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from application import User
from application.app import App
from infrastructure import bootstrap as wiring
from tests.integration.custom_fields.helpers import define, fields_of, set_value
from tests.integration.retention.support import MovingClock, on_clock, sweep
from tests.support.results import ok


def make_old(app: App) -> None:
    """The tables as the release before retention created them."""
    db = wiring.projection_runner(app).db
    with db.transaction() as cur:
        cur.execute("DROP TABLE cf_value_clock")
        cur.execute("ALTER TABLE cf_definitions DROP COLUMN keep_for")
        cur.execute("ALTER TABLE cf_definitions DROP COLUMN retention_action")


def clock_rows(app: App) -> list[tuple[Any, ...]]:
    with wiring.projection_runner(app).db.reading() as cur:
        cur.execute("SELECT entity_id, field_key FROM cf_value_clock ORDER BY entity_id")
        return [tuple(row) for row in cur.fetchall()]


def test_a_read_model_older_than_retention_is_rebuilt_at_start_up(
    make_app: Callable[..., App], admin: User, caplog: pytest.LogCaptureFixture
) -> None:
    clock = MovingClock()
    old = on_clock(make_app, clock)
    ok(define(old, admin, "note"))
    ok(set_value(old, admin, "c1", "note", "stored before the upgrade"))
    ok(set_value(old, admin, "c2", "note", "also before"))
    old.projections.catch_up()
    make_old(old)
    old.close()

    with caplog.at_level(logging.WARNING, logger="tidings.projections"):
        app = on_clock(make_app, clock)
    messages = [r.getMessage() for r in caplog.records]
    assert "projection.upgrade name=custom_fields reason=predates_retention action=rebuild" in (
        messages
    )
    assert "projection.upgraded name=custom_fields" in messages
    assert clock_rows(app) == [("c1", "note"), ("c2", "note")]
    assert fields_of(app, admin, "c1") == {"note": "stored before the upgrade"}

    update = {"entityName": "contact", "fieldKey": "note", "field": {"type": "text"}}
    retention = {"keepFor": "30d", "action": "delete"}
    ok(app.write("update-tenant-field", {**update, "retention": retention}, admin))
    clock.move(days=30)
    assert sweep(app) == 2
    assert fields_of(app, admin, "c1") == {}

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tidings.projections"):
        again = on_clock(make_app, clock)  # an upgraded read model is left as it is
    assert not [r for r in caplog.records if "projection.upgrade" in r.getMessage()]
    assert clock_rows(again) == []


def test_a_fresh_database_is_not_upgraded(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tidings.projections"):
        make_app()
        make_app()
    assert not [r for r in caplog.records if "projection.upgrade" in r.getMessage()]


def retention_indexes(app: App) -> list[str]:
    db = wiring.projection_runner(app).db
    with db.reading() as cur:
        if db.dialect == "postgresql":
            cur.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
                " AND tablename = 'mail_messages' AND indexname LIKE ?",
                ("ix_mail_messages_due_%",),
            )
        else:
            cur.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index'"
                " AND tbl_name = 'mail_messages' AND name LIKE ?",
                ("ix_mail_messages_due_%",),
            )
        return sorted(str(row[0]) for row in cur.fetchall())


def test_a_messages_table_older_than_mail_retention_gains_its_column_and_indexes_once(
    make_app: Callable[..., App],
) -> None:
    old = make_app()
    db = wiring.projection_runner(old).db
    with db.transaction() as cur:
        for name in retention_indexes(old):
            cur.execute(f"DROP INDEX {name}")
        cur.execute("ALTER TABLE mail_messages DROP COLUMN body_erased")
    old.close()
    upgraded = make_app()
    indexes = retention_indexes(upgraded)
    assert len(indexes) == 2
    with wiring.projection_runner(upgraded).db.reading() as cur:
        cur.execute("SELECT count(*) FROM mail_messages WHERE body_erased = 0")
        assert cur.fetchone() is not None
    assert retention_indexes(make_app()) == indexes  # made once, not at every start


def test_a_read_model_without_the_stream_versions_is_rebuilt_at_start_up(
    make_app: Callable[..., App], admin: User, caplog: pytest.LogCaptureFixture
) -> None:
    clock = MovingClock()
    old = on_clock(make_app, clock)
    ok(define(old, admin, "note"))
    ok(set_value(old, admin, "c1", "note", "stored before the versions"))
    ok(set_value(old, admin, "c1", "note", "and again"))
    old.projections.catch_up()
    with wiring.projection_runner(old).db.transaction() as cur:
        cur.execute("ALTER TABLE cf_entity_values DROP COLUMN version")
    old.close()

    with caplog.at_level(logging.WARNING, logger="tidings.projections"):
        app = on_clock(make_app, clock)
    assert "projection.upgraded name=custom_fields" in [r.getMessage() for r in caplog.records]
    with wiring.projection_runner(app).db.reading() as cur:
        cur.execute("SELECT entity_id, version FROM cf_entity_values")
        assert [tuple(row) for row in cur.fetchall()] == [("c1", 2)]
