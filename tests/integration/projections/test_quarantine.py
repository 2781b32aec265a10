"""The projection quarantine on both backends: an event a projection cannot apply (or
the codec cannot decode) is set aside with its projection, position, tenant and error;
every other event, of every tenant, still applies exactly once; a rebuild applies the
quarantined events again, so a fix lets them through and anything else stays put."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from application import User
from application.app import App
from domain.custom_field_values import CustomFieldValueSet, entity_stream_id
from domain.field_definition import definition_id
from infrastructure import bootstrap as wiring
from infrastructure.bootstrap_workers import build_supervisor
from infrastructure.eventstore import codec as codec_module
from infrastructure.runtime.settings import Settings
from projections.runner import ProjectionRunner
from tests.integration.custom_fields.helpers import define, fields_of, set_value
from tests.integration.projections.support import (
    CountingProjection,
    bulk_values,
    counting_runner,
    serving,
)
from tests.support.results import ok


def poison_value(app: App, tenant_id: str, entity_id: str, value_json: str) -> int:
    """Append, through the recorder and past the codec, a value event whose state the
    codec refuses to read (the way an older encoder or an import could have written it);
    answer its position."""
    state = (
        '{"_v":1,"timestamp":"'
        + datetime.now(UTC).isoformat()
        + '",'
        + json.dumps(
            {
                "tenant_id": tenant_id,
                "entity_name": "contact",
                "entity_id": entity_id,
                "field_key": "n",
                "definition_id": str(definition_id(tenant_id, "contact", "n")),
                "generation": 1,
            }
        )[1:-1]
        + ',"value":'
        + value_json
        + "}"
    ).encode()
    stream: UUID = entity_stream_id(tenant_id, "contact", entity_id)
    wiring.event_store(app).append_stored([(stream, 1, CustomFieldValueSet.TOPIC, state)])
    return serving(app).log.head()


def other(tenant: str, suffix: str) -> User:
    return User(id="u-" + suffix, tenant_id=f"{tenant}-{suffix}", roles=frozenset({"TenantAdmin"}))


def quarantined_of(app: App) -> dict[str, int]:
    return {s.name: s.quarantined for s in app.projections.status()}


def test_a_poison_event_is_quarantined_and_every_other_tenant_goes_on(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app(project_inline=True)
    hostile, friend = admin, other(admin.tenant_id, "friend")
    ok(define(app, hostile, "n", "number"))
    ok(define(app, friend, "n", "number"))
    ok(set_value(app, friend, "f1", "n", 1))
    position = poison_value(app, hostile.tenant_id, "h1", "1" + "0" * 400)
    # the next write of another tenant commits, projects inline past the poison, succeeds
    ok(set_value(app, friend, "f2", "n", 2))
    assert app.projections.catch_up() == 0
    assert (fields_of(app, friend, "f1"), fields_of(app, friend, "f2")) == ({"n": 1}, {"n": 2})
    assert quarantined_of(app) == {"custom_fields": 1, "mail": 1, "feed": 1, "mail_outbound": 1}
    assert all(s.lag == 0 for s in app.projections.status())

    listed = serving(app).quarantined()
    assert [(q.projection, q.position, q.tenant_id, q.topic, q.error_class) for q in listed] == [
        (name, position, hostile.tenant_id, CustomFieldValueSet.TOPIC, "UnreadableEvent")
        for name in ("custom_fields", "feed", "mail", "mail_outbound")
    ]
    assert "infinity" in listed[0].error_message
    assert serving(app).quarantined("mail") == listed[2:3]

    # the hostile tenant's own stream fails its own calls with a Result, never a raise
    result = set_value(app, hostile, "h1", "n", 3)
    assert result.error is not None and result.error.code == "stream_unreadable"
    ok(set_value(app, hostile, "h2", "n", 3))

    # a rebuild applies it again: still unreadable, still quarantined, nothing else lost
    app.projections.rebuild()
    assert quarantined_of(app) == {"custom_fields": 1, "mail": 1, "feed": 1, "mail_outbound": 1}
    assert [q.position for q in serving(app).quarantined()] == [position] * 4
    assert fields_of(app, friend, "f2") == {"n": 2}
    assert fields_of(app, hostile, "h2") == {"n": 3}


def test_after_a_fix_a_rebuild_applies_the_quarantined_event(
    app: App, admin: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok(define(app, admin, "n", "number"))
    poison_value(app, admin.tenant_id, "h1", "1" + "0" * 400)
    app.projections.catch_up()
    assert quarantined_of(app) == {"custom_fields": 1, "mail": 1, "feed": 1, "mail_outbound": 1}
    assert fields_of(app, admin, "h1") is None
    # the fix: a reader that takes integers of any size
    monkeypatch.setattr(codec_module, "loads", json.loads)
    app.projections.rebuild()
    assert quarantined_of(app) == {"custom_fields": 0, "mail": 0, "feed": 0, "mail_outbound": 0}
    assert serving(app).quarantined() == []
    assert fields_of(app, admin, "h1") == {"n": 10**400}


def test_a_projection_failing_on_one_event_quarantines_that_event_alone(
    app: App, admin: User
) -> None:
    bulk_values(app, admin.tenant_id, "c", 250, per_append=50)
    broken = CountingProjection(fail_at=120)
    runner = counting_runner(app, batch_size=100, projection=broken)
    assert runner.catch_up() == 250
    # the rest of the failing batch and its position committed with the quarantine row
    assert broken.positions(runner.db) == [p for p in range(1, 251) if p != 120]
    (held,) = runner.quarantined()
    assert (held.projection, held.position, held.tenant_id, held.error_class) == (
        "test_counting",
        120,
        admin.tenant_id,
        "RuntimeError",
    )
    assert held.error_message == "projection failure at position 120"
    assert [(s.position, s.lag, s.quarantined) for s in runner.status()] == [(250, 0, 1)]
    assert runner.catch_up() == 0  # exactly once: nothing is applied or quarantined again

    runner.rebuild()  # not fixed: quarantined again, under the serving name
    assert [q.position for q in runner.quarantined()] == [120]
    assert broken.positions(runner.db) == [p for p in range(1, 251) if p != 120]

    broken.fail_at = None  # fixed
    runner.rebuild()
    assert runner.quarantined() == []
    assert broken.positions(runner.db) == list(range(1, 251))


def test_the_metric_counts_quarantined_events_per_projection(app: App, admin: User) -> None:
    ok(define(app, admin, "n", "number"))
    poison_value(app, admin.tenant_id, "h1", "1e999")
    poison_value(app, admin.tenant_id, "h2", "NaN")
    app.projections.catch_up()
    registry = CollectorRegistry()
    registry.register(serving(app).metrics_collector())
    text = generate_latest(registry).decode()
    assert 'tidings_projection_quarantined{projection="custom_fields"} 2.0' in text
    assert 'tidings_projection_quarantined{projection="mail"} 2.0' in text


def test_hostile_text_in_a_quarantined_event_is_stored_safely(app: App, admin: User) -> None:
    # A tenant id with NUL and a lone surrogate (an import could carry one): the
    # quarantine row must still be writable on PostgreSQL.
    ok(define(app, admin, "n", "number"))
    hostile_tenant = admin.tenant_id + "\\u0000\\ud800"
    state_tenant = json.loads(f'"{hostile_tenant}"')
    stream = entity_stream_id("x", "contact", "h")
    state = (
        '{"_v":1,"timestamp":"2026-01-01T00:00:00+00:00","tenant_id":"'
        + hostile_tenant
        + '","value":1e999}'
    ).encode()
    wiring.event_store(app).append_stored([(stream, 1, CustomFieldValueSet.TOPIC, state)])
    app.projections.catch_up()
    listed = serving(app).quarantined()
    assert len(listed) == 4  # custom_fields, feed, mail, mail_outbound
    assert (
        listed[0].tenant_id
        == state_tenant.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode()
    )


def test_a_batch_with_a_bad_event_applies_the_good_ones_exactly_once_under_two_runners(
    app: App, admin: User
) -> None:
    bulk_values(app, admin.tenant_id, "c", 300, per_append=100)
    projection = CountingProjection(fail_at=150)
    first = counting_runner(app, batch_size=100, projection=projection)
    second = ProjectionRunner(first.db, first.log, [projection], batch_size=100)
    results: list[Any] = [first.step(projection), second.step(projection)]
    results += [first.catch_up(), second.catch_up()]
    assert sum(results) == 300
    assert projection.positions(first.db) == [p for p in range(1, 301) if p != 150]
    assert [q.position for q in second.quarantined()] == [150]


def test_the_worker_exports_the_quarantine_metric(
    app: App, admin: User, database_url: str, tmp_path: Path
) -> None:
    ok(define(app, admin, "n", "number"))
    poison_value(app, admin.tenant_id, "h1", "1e999")
    app.projections.catch_up()
    settings = Settings(database_url=database_url, blob_dir=tmp_path / "blobs")
    supervisor = build_supervisor(app, settings, "w-metrics")
    text = generate_latest(supervisor.metrics.registry).decode()
    assert 'tidings_projection_quarantined{projection="custom_fields"} 1.0' in text


def test_retry_applies_one_quarantined_event_once_its_cause_is_fixed(
    app: App, admin: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    from application import SYSTEM_TENANT_ID, read_models  # noqa: PLC0415

    ok(define(app, admin, "n", "number"))
    position = poison_value(app, admin.tenant_id, "h1", "1" + "0" * 400)
    app.projections.catch_up()
    system = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
    # Only the system's SystemAdmin retries (a tenant's admin is refused before a read).
    refused = read_models.retry(app.projections, admin, "custom_fields", position)
    assert refused.error is not None and refused.error.status == 403
    # Still unreadable: it fails again and stays, the others untouched.
    again = ok(read_models.retry(app.projections, system, "custom_fields", position))
    assert again["outcome"] == "failed"
    assert quarantined_of(app) == {"custom_fields": 1, "mail": 1, "feed": 1, "mail_outbound": 1}
    monkeypatch.setattr(codec_module, "loads", json.loads)  # the fix
    applied = ok(read_models.retry(app.projections, system, "custom_fields", position))
    assert applied["outcome"] == "applied"
    assert quarantined_of(app) == {"custom_fields": 0, "mail": 1, "feed": 1, "mail_outbound": 1}
    assert fields_of(app, admin, "h1") == {"n": int("1" + "0" * 400)}
    # Once applied it is gone: a second retry finds nothing, as does a made-up one.
    for name, at in (("custom_fields", position), ("custom_fields", 10**9), ("nope", 1)):
        gone = read_models.retry(app.projections, system, name, at)
        assert gone.error is not None and gone.error.status == 404
    listed = ok(read_models.quarantined(app.projections, system))["events"]
    assert sorted(q["projection"] for q in listed) == ["feed", "mail", "mail_outbound"]
