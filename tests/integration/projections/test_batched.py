"""Set-based batches on both backends: a batch applied in one statement per table gives
exactly what applying its events one at a time gives, and an event that makes the
batch's statement fail is found by halving and quarantined alone."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from application import User
from application.app import App
from application.custom_fields.sealing import seal_value
from application.ports import Dialect, Recorded, SqlCursor, SqlDatabase
from application.users import SYSTEM_TENANT_ID
from domain.custom_field_values import (
    CustomFieldValueCleared,
    CustomFieldValueSet,
    entity_stream_id,
)
from domain.field_definition import definition_id
from projections.base import SHADOW_SUFFIX
from projections.custom_fields import CustomFieldsProjection
from projections.feed import FeedProjection
from projections.runner import ProjectionRunner
from tests.integration.custom_fields.helpers import clear, define, delete, fields_of, set_value
from tests.integration.projections.support import bulk_values, serving
from tests.support.results import ok


class SetBasedProjection:
    """Writes each batch with one statement (arrays on PostgreSQL, one executemany on
    SQLite) into a table that refuses the entity id ``poison0``."""

    def __init__(self, table: str = "test_set_based", name: str = "test_set_based") -> None:
        self.name = name
        self.tables = {"rows": table}
        self.attempts: list[int] = []

    def shadow(self) -> SetBasedProjection:
        return SetBasedProjection(self.tables["rows"] + SHADOW_SUFFIX, self.name + SHADOW_SUFFIX)

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self.tables['rows']} (position BIGINT PRIMARY KEY,"
            " entity_id TEXT NOT NULL CHECK (entity_id <> 'poison0'))"
        )

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        self.attempts.append(len(batch))
        rows = [
            (r.position, r.event.entity_id)
            for r in batch
            if isinstance(r.event, CustomFieldValueSet)
        ]
        table = self.tables["rows"]
        if dialect == "postgresql":
            cur.execute(
                f"INSERT INTO {table} SELECT * FROM unnest(?::bigint[], ?::text[])",
                [[p for p, _ in rows], [e for _, e in rows]],
            )
        else:
            cur.executemany(f"INSERT INTO {table} VALUES (?, ?)", rows)

    def rows(self, db: SqlDatabase) -> list[tuple[int, str]]:
        with db.reading() as cur:
            cur.execute(f"SELECT position, entity_id FROM {self.tables['rows']} ORDER BY 1")
            return [(int(p), str(e)) for p, e in cur.fetchall()]


def test_a_poison_event_in_a_set_based_batch_is_quarantined_alone(app: App, admin: User) -> None:
    bulk_values(app, admin.tenant_id, "c", 300, per_append=300)
    bulk_values(app, admin.tenant_id, "poison", 1, per_append=1)  # "poison0": refused
    bulk_values(app, admin.tenant_id, "d", 211, per_append=211)
    log = serving(app).log
    written = [
        (e.position, e.event.entity_id)
        for e in log.page(0, 10_000, None).entries
        if isinstance(e, Recorded) and isinstance(e.event, CustomFieldValueSet)
    ]
    (poison,) = [position for position, entity_id in written if entity_id == "poison0"]
    projection = SetBasedProjection()
    runner = ProjectionRunner(serving(app).db, log, [projection], batch_size=5000)
    runner.setup()
    assert runner.catch_up() == log.head()
    assert projection.rows(runner.db) == [row for row in written if row[0] != poison]
    (held,) = runner.quarantined()
    assert (held.projection, held.position, held.tenant_id) == (
        "test_set_based",
        poison,
        admin.tenant_id,
    )
    assert held.error_class in ("IntegrityError", "CheckViolation")  # SQLite, PostgreSQL
    # halving: the whole batch, then two attempts per level, not one per event
    assert len(projection.attempts) <= 2 * math.ceil(math.log2(len(written))) + 1
    assert runner.catch_up() == 0  # exactly once


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_value_postgresql_cannot_store_is_quarantined_alone_from_its_batch(
    app: App, admin: User
) -> None:
    # An imported event whose entity id holds NUL, of a live key: PostgreSQL text refuses
    # it, so the batch's statement fails; the event alone is quarantined, its neighbours
    # all land. (The feed keeps the id inside JSON text, escaped, and takes it.)
    ok(define(app, admin, "n", "number"))
    bulk_values(app, admin.tenant_id, "a", 40, per_append=40)
    bulk_values(app, admin.tenant_id, "b\x00", 1, per_append=1)
    bulk_values(app, admin.tenant_id, "c", 40, per_append=40)
    app.projections.catch_up()
    held = {(q.projection, q.topic) for q in serving(app).quarantined()}
    assert held == {("custom_fields", CustomFieldValueSet.TOPIC)}
    with serving(app).db.reading() as cur:
        cur.execute("SELECT count(*) FROM cf_entity_values WHERE tenant_id = ?", (admin.tenant_id,))
        assert cur.fetchone()[0] == 80


# --- batched and one-at-a-time application agree ---------------------------------------

KEYS = ("k1", "k2", "k3")
ENTITIES = ("e1", "e2", "e3")
OPS = st.one_of(
    st.tuples(st.just("define"), st.sampled_from("ABS"), st.sampled_from(KEYS)),
    st.tuples(
        st.just("set"),
        st.sampled_from("AB"),
        st.sampled_from(ENTITIES),
        st.sampled_from(KEYS),
        st.integers(0, 9),
    ),
    st.tuples(
        st.just("clear"), st.sampled_from("AB"), st.sampled_from(ENTITIES), st.sampled_from(KEYS)
    ),
    st.tuples(st.just("delete"), st.sampled_from("ABS"), st.sampled_from(KEYS)),
)


def _users(run: str) -> dict[str, User]:
    users = {
        name: User(id=f"admin-{name}", tenant_id=f"t{name}-{run}", roles=frozenset({"TenantAdmin"}))
        for name in "AB"
    }
    users["S"] = User(id="operator", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
    return users


def _write(app: App, users: dict[str, User], op: tuple[Any, ...], run: str) -> None:
    kind, who, *args = op
    user = users[who]
    if kind == "define":  # every key is text: every set of a defined key lands
        (key,) = args
        define(app, user, key, "text")
    elif kind == "set":
        entity_id, key, value = args
        set_value(app, user, entity_id, key, f"v{value}")
    elif kind == "clear":
        clear(app, user, *args)
    else:
        (key,) = args
        delete(app, user, key)


def _models(suffix: str) -> list[Any]:
    return [
        CustomFieldsProjection(
            {
                "definitions": f"bt_defs_{suffix}",
                "entity_values": f"bt_values_{suffix}",
                "value_clock": f"bt_clock_{suffix}",
            },
            name=f"bt_cf_{suffix}",
        ),
        FeedProjection(
            {"items": f"bt_items_{suffix}", "heads": f"bt_heads_{suffix}"}, name=f"bt_feed_{suffix}"
        ),
    ]


def _contents(db: SqlDatabase, suffix: str) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    with db.reading() as cur:
        cur.execute(f"SELECT * FROM bt_defs_{suffix} ORDER BY tenant_id, entity_name, field_key")
        found["definitions"] = [tuple(row) for row in cur.fetchall()]
        cur.execute(
            f"SELECT tenant_id, entity_name, entity_id, fields FROM bt_values_{suffix}"
            " ORDER BY tenant_id, entity_name, entity_id"
        )
        found["values"] = [
            (*row[:3], row[3] if isinstance(row[3], dict) else json.loads(row[3]))
            for row in cur.fetchall()
        ]
        cur.execute(
            f"SELECT * FROM bt_clock_{suffix}"
            " ORDER BY tenant_id, entity_name, entity_id, field_key, definition_id, generation"
        )
        found["clock"] = [tuple(row) for row in cur.fetchall()]
        cur.execute(f"SELECT * FROM bt_items_{suffix} ORDER BY tenant_id, sequence")
        found["items"] = [tuple(row) for row in cur.fetchall()]
        cur.execute(f"SELECT * FROM bt_heads_{suffix} ORDER BY tenant_id")
        found["heads"] = [tuple(row) for row in cur.fetchall()]
    return found


@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, min_size=1, max_size=24), small=st.integers(2, 7))
@example(
    ops=[
        ("define", "A", "k1"),
        ("set", "A", "e1", "k1", 1),
        ("set", "A", "e1", "k1", 3),
        ("define", "A", "k2"),
        ("set", "A", "e1", "k2", 2),
        ("clear", "A", "e1", "k1"),
        ("set", "A", "e1", "k1", 5),
        ("set", "A", "e2", "k2", 4),
        ("define", "S", "k3"),
        ("set", "B", "e1", "k3", 7),
        ("delete", "A", "k2"),
        ("define", "A", "k2"),
        ("set", "A", "e1", "k2", 9),
        ("set", "B", "e2", "k3", 1),
        ("set", "B", "e2", "k3", 2),
    ],
    small=3,
)
def test_batched_application_and_rebuilds_equal_one_event_at_a_time(
    app: App, ops: list[tuple[Any, ...]], small: int
) -> None:
    # Examples share the database (and the system fields): each has its own tenants
    # and read models, and the three runners read the same whole log.
    run = uuid.uuid4().hex[:8]
    users = _users(run)
    for op in ops:
        _write(app, users, op, run)
    log, db = serving(app).log, serving(app).db
    contents = []
    for suffix, batch_size in ((f"w{run}", 5000), (f"o{run}", 1), (f"s{run}", small)):
        runner = ProjectionRunner(db, log, _models(suffix), batch_size=batch_size)
        runner.setup()
        runner.catch_up()
        assert runner.quarantined() == []
        contents.append(_contents(db, suffix))
    whole, one_by_one, small_batches = contents
    assert whole == one_by_one == small_batches
    # A rebuild (shadows filled side by side, then swapped in) gives the same rows.
    for batch_size in (5000, small):
        ProjectionRunner(db, log, _models(f"w{run}"), batch_size=batch_size).rebuild()
        assert _contents(db, f"w{run}") == whole


def test_a_row_exists_after_a_batch_exactly_when_a_live_value_was_set_on_it(
    app: App, admin: User
) -> None:
    # A clear with no set before it (an imported log can hold one) creates no row; a set
    # and then a clear in the same batch leave an empty row, as one at a time would.
    ok(define(app, admin, "n", "number"))
    now = datetime.now(UTC)
    tenant = admin.tenant_id
    common: dict[str, Any] = {
        "tenant_id": tenant,
        "entity_name": "contact",
        "field_key": "n",
        "definition_id": str(definition_id(tenant, "contact", "n")),
        "generation": 1,
        "timestamp": now,
    }
    sealed, digest = seal_value(
        app.ctx, tenant, entity_name="contact", entity_id="brief", field_key="n", value=1
    )
    app.ctx.store.append(
        [
            CustomFieldValueCleared(
                originator_id=entity_stream_id(tenant, "contact", "ghost"),
                originator_version=1,
                entity_id="ghost",
                **common,
            ),
            CustomFieldValueSet(
                originator_id=entity_stream_id(tenant, "contact", "brief"),
                originator_version=1,
                entity_id="brief",
                sealed=sealed,
                digest=digest,
                **common,
            ),
            CustomFieldValueCleared(
                originator_id=entity_stream_id(tenant, "contact", "brief"),
                originator_version=2,
                entity_id="brief",
                **common,
            ),
        ]
    )
    app.projections.catch_up()
    assert fields_of(app, admin, "ghost") is None
    assert fields_of(app, admin, "brief") == {}


class _ValuesOnly(SetBasedProjection):
    topics = frozenset({CustomFieldValueSet.TOPIC})

    def __init__(self) -> None:
        super().__init__("test_values_only", "test_values_only")
        self.seen: list[str] = []

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        self.seen += [r.event.TOPIC for r in batch]
        super().apply(cur, dialect, batch)


def test_a_projection_with_topics_gets_only_those_and_still_reaches_the_head(
    app: App, admin: User
) -> None:
    ok(define(app, admin, "n", "number"))  # a definition event (and its catalog's)
    bulk_values(app, admin.tenant_id, "c", 30, per_append=30)
    log = serving(app).log
    head = log.head()
    page = log.page(0, 5000, frozenset({CustomFieldValueSet.TOPIC}))
    assert (page.count, page.last) == (head, head)
    assert {type(e.event) for e in page.entries if isinstance(e, Recorded)} == {CustomFieldValueSet}
    projection = _ValuesOnly()
    runner = ProjectionRunner(serving(app).db, log, [projection], batch_size=7)
    runner.setup()
    assert runner.catch_up() == head
    assert projection.seen == [CustomFieldValueSet.TOPIC] * 30
    assert [(s.position, s.lag) for s in runner.status()] == [(head, 0)]
