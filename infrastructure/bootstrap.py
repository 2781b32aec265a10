"""The composition root: settings in, a wired ``App`` out. Nothing else wires adapters."""

from __future__ import annotations

from typing import Any

from application.app import App
from application.context import Context, Policy
from application.ports import SqlDatabase
from domain.all_events import EVENT_CLASSES
from infrastructure.clock import SystemClock
from infrastructure.codec import EventCodec
from infrastructure.database import DatabaseUrl, PostgresDatabase, SqliteDatabase
from infrastructure.eventstore import RecorderEventStore, open_recorder
from infrastructure.settings import Settings
from projections.custom_fields import CustomFieldsProjection, CustomFieldsReader
from projections.runner import ProjectionRunner


def open_database(url: DatabaseUrl) -> SqliteDatabase | PostgresDatabase:
    if url.dialect == "sqlite":
        assert url.sqlite_path is not None
        url.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        return SqliteDatabase(url.sqlite_path)
    db = PostgresDatabase(url)
    db.ensure_schema()
    return db


def open_event_store(url: DatabaseUrl) -> tuple[RecorderEventStore, Any]:
    recorder, datastore = open_recorder(url)
    return RecorderEventStore(recorder, EventCodec(EVENT_CLASSES)), datastore


def build_projections(
    db: SqlDatabase, store: RecorderEventStore, batch_size: int
) -> ProjectionRunner:
    runner = ProjectionRunner(db, store, [CustomFieldsProjection()], batch_size=batch_size)
    runner.setup()
    return runner


def bootstrap(settings: Settings | None = None, **overrides: Any) -> App:
    """Build the app from ``TIDINGS_*`` settings; keyword arguments override them."""
    settings = settings or Settings(**overrides)
    url = DatabaseUrl.parse(settings.database_url)
    db = open_database(url)
    store, datastore = open_event_store(url)
    runner = build_projections(db, store, settings.projection_batch_size)
    ctx = Context(
        store=store,
        clock=SystemClock(),
        custom_fields=CustomFieldsReader(db),
        policy=Policy(
            field_definition_limit_per_tenant=settings.field_definition_limit_per_tenant,
            field_definition_write_roles=settings.field_definition_write_roles,
            value_write_roles=settings.value_write_roles,
        ),
    )

    def close() -> None:
        db.close()
        datastore.close()

    inline = settings.project_inline
    return App(
        ctx,
        runner,
        on_close=close,
        project_inline=url.dialect == "sqlite" if inline is None else inline,
    )
