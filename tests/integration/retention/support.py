"""What the retention tests share: a clock they move, an app on it, a sweeper over it,
and the expiries each entity's stream holds."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from application import User
from application.app import App
from application.leases import LeaseBackend
from application.retention.sweeper import RetentionSweeper
from domain.custom_field_values import CustomFieldValueExpired, entity_stream_id
from infrastructure import bootstrap as wiring
from infrastructure.in_process.lease import InProcessLease
from infrastructure.runtime.settings import Settings
from tests.integration.custom_fields.helpers import define
from tests.support.results import ok

START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


class MovingClock:
    """The clock port, moved by the test (never by sleeping)."""

    def __init__(self, at: datetime = START) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def move(self, **delta: float) -> None:
        self.at += timedelta(**delta)


def on_clock(make_app: Callable[..., App], clock: MovingClock, **settings: Any) -> App:
    app = make_app(**settings)
    app.ctx = dataclasses.replace(app.ctx, clock=clock)
    return app


def sweeper(
    app: App, batch_size: int = 1000, lease: LeaseBackend | None = None
) -> RetentionSweeper:
    """The app's sweeper as the workers build it (its own in-process lease unless given)."""
    settings = Settings(database_url="sqlite://", retention_batch_size=batch_size)
    return wiring.retention_sweeper(app, settings, lease=lease or InProcessLease(60.0))


def sweep(app: App, batch_size: int = 1000) -> int:
    """One run, then the projections caught up; the expiries recorded."""
    app.projections.catch_up()
    report = sweeper(app, batch_size).run()
    assert report is not None
    app.projections.catch_up()
    return report.recorded


def define_kept(
    app: App,
    user: User,
    key: str,
    field_type: str = "text",
    keep_for: str = "30d",
    action: str = "delete",
    **extra: Any,
) -> None:
    ok(
        define(
            app, user, key, field_type, retention={"keepFor": keep_for, "action": action}, **extra
        )
    )


def expiries(
    app: App, tenant: str, entity_ids: list[str], entity: str = "contact"
) -> list[CustomFieldValueExpired]:
    """Every expiry recorded on those entities' streams, in stream order."""
    streams = [entity_stream_id(tenant, entity, entity_id) for entity_id in entity_ids]
    loaded = app.ctx.store.load_many(streams)
    return [e for s in streams for e in loaded[s] if isinstance(e, CustomFieldValueExpired)]
