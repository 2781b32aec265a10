"""The six invariants of custom fields (docs/app-layer.md, docs/projections.md), each a
named test, on both backends."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from application import Result, User
from application.app import App
from application.custom_fields.sealing import seal_value
from application.ports import SqlCursor, SqlDatabase
from application.streams import commit, load
from domain.custom_field_values import EntityCustomFields, entity_stream_id
from domain.field_definition import catalog_id, definition_id
from projections.custom_fields import TABLES, CustomFieldsProjection
from projections.runner import ProjectionRunner
from tests.integration.custom_fields.helpers import (
    all_entities,
    clear,
    define,
    definitions,
    delete,
    fields_of,
    set_value,
    snapshot,
)
from tests.support.results import failed, ok


def tenant_admin() -> User:
    return User(
        "a-" + uuid.uuid4().hex[:6], "t-" + uuid.uuid4().hex[:8], frozenset({"TenantAdmin"})
    )


def keys_everywhere(app: App, user: User, entity_ids: Sequence[str]) -> set[str]:
    """Every field key any read path returns for this user's entities."""
    found: set[str] = set()
    for entity_id in entity_ids:
        found |= set(fields_of(app, user, entity_id) or {})
    for item in all_entities(app, user) + all_entities(app, user, limit=1):
        found |= set(item["customFields"])
    return found


# --- 1. after a delete no read path returns the key's values --------------------------


def test_invariant_1_tenant_delete_removes_the_values_of_that_tenant_only(app: App) -> None:
    a, b = tenant_admin(), tenant_admin()
    for user in (a, b):
        ok(define(app, user, "tier", searchable=True))
        ok(define(app, user, "keep"))
        for entity_id in ("c1", "c2", "c3"):
            ok(set_value(app, user, entity_id, "tier", "gold"))
            ok(set_value(app, user, entity_id, "keep", entity_id))
    app.projections.catch_up()
    ok(delete(app, a, "tier"))
    app.projections.catch_up()

    assert keys_everywhere(app, a, ["c1", "c2", "c3"]) == {"keep"}
    failed(
        app.query("list-entities", {"entityName": "contact", "where": {"tier": "gold"}}, a),
        "field_not_searchable",
        422,
    )
    assert [d["fieldKey"] for d in definitions(app, a)] == ["keep"]
    # the other tenant keeps everything
    assert keys_everywhere(app, b, ["c1", "c2", "c3"]) == {"tier", "keep"}
    assert len(all_entities(app, b, where={"tier": "gold"})) == 3


def test_invariant_1_system_delete_removes_the_values_in_every_tenant(
    app: App, operator: User
) -> None:
    tenants = [tenant_admin() for _ in range(3)]
    ok(define(app, operator, "vip", "boolean", searchable=True))
    ok(define(app, operator, "vip", "boolean", entity="deal"))  # same key, another entity
    for user in tenants:
        ok(define(app, user, "own"))
        for entity_id in ("c1", "c2"):
            ok(set_value(app, user, entity_id, "vip", True))
            ok(set_value(app, user, entity_id, "own", "mine"))
        ok(set_value(app, user, "d1", "vip", True, entity="deal"))
    app.projections.catch_up()
    ok(delete(app, operator, "vip"))
    app.projections.catch_up()
    for user in tenants:
        assert keys_everywhere(app, user, ["c1", "c2"]) == {"own"}
        failed(
            app.query("list-entities", {"entityName": "contact", "where": {"vip": True}}, user),
            "field_not_searchable",
            422,
        )
        assert fields_of(app, user, "d1", entity="deal") == {"vip": True}


def test_invariant_1_system_delete_spares_a_tenants_own_definition_of_the_key(
    app: App, operator: User
) -> None:
    # A tenant defined "vip" itself before the operator did: its values are its own.
    own, other = tenant_admin(), tenant_admin()
    ok(define(app, own, "vip", "text"))
    ok(set_value(app, own, "c1", "vip", "mine"))
    ok(define(app, operator, "vip", "boolean"))
    ok(set_value(app, other, "c1", "vip", True))
    app.projections.catch_up()
    ok(delete(app, operator, "vip"))
    app.projections.catch_up()
    assert fields_of(app, own, "c1") == {"vip": "mine"}
    assert fields_of(app, other, "c1") == {}
    before = snapshot(app, [own, other], entity_ids=["c1"])
    app.projections.rebuild()
    assert snapshot(app, [own, other], entity_ids=["c1"]) == before


# --- 2. re-defining a deleted key starts empty ----------------------------------------


def test_invariant_2_redefine_starts_empty_also_after_rebuild(app: App, admin: User) -> None:
    ok(define(app, admin, "tier", searchable=True))
    for entity_id in ("c1", "c2"):
        ok(set_value(app, admin, entity_id, "tier", "old"))
    ok(delete(app, admin, "tier"))
    ok(define(app, admin, "tier", "number", searchable=True))  # another type, even
    app.projections.catch_up()
    assert keys_everywhere(app, admin, ["c1", "c2"]) == set()
    assert all_entities(app, admin, where={"tier": "old"}) == []
    app.projections.rebuild()
    assert keys_everywhere(app, admin, ["c1", "c2"]) == set()
    ok(set_value(app, admin, "c1", "tier", 7))
    app.projections.catch_up()
    assert fields_of(app, admin, "c1") == {"tier": 7}
    assert fields_of(app, admin, "c2") == {}


def race_a_stale_value(
    app: App, user: User, entity_id: str, key: str, generation: int, value: Any
) -> None:
    """What a writer that validated against ``generation`` and committed late appends."""
    stream = entity_stream_id(user.tenant_id, "contact", entity_id)
    entity = load(app.ctx.store, EntityCustomFields, stream)
    sealed, digest = seal_value(
        app.ctx,
        user.tenant_id,
        entity_name="contact",
        entity_id=entity_id,
        field_key=key,
        value=value,
    )
    entity.set_value(
        tenant_id=user.tenant_id,
        entity_name="contact",
        entity_id=entity_id,
        field_key=key,
        definition_id=definition_id(user.tenant_id, "contact", key),
        generation=generation,
        sealed=sealed,
        digest=digest,
        now=datetime.now(UTC),
    )
    commit(app.ctx.store, entity)


def test_invariant_2_a_racing_value_committed_after_the_delete_never_surfaces(
    app: App, admin: User
) -> None:
    ok(define(app, admin, "tier"))
    ok(set_value(app, admin, "c1", "tier", "before"))
    app.projections.catch_up()
    ok(delete(app, admin, "tier"))
    race_a_stale_value(app, admin, "c1", "tier", 1, "raced")  # after the delete
    race_a_stale_value(app, admin, "c2", "tier", 1, "raced")
    app.projections.catch_up()
    assert keys_everywhere(app, admin, ["c1", "c2"]) == set()

    ok(define(app, admin, "tier"))
    race_a_stale_value(app, admin, "c1", "tier", 1, "raced later")  # after the re-define
    app.projections.catch_up()
    assert keys_everywhere(app, admin, ["c1", "c2"]) == set()
    app.projections.rebuild()
    assert keys_everywhere(app, admin, ["c1", "c2"]) == set()

    # the live generation still works, and its value can be cleared despite the stale one
    ok(set_value(app, admin, "c1", "tier", "live"))
    race_a_stale_value(app, admin, "c1", "tier", 1, "raced again")
    app.projections.catch_up()
    assert fields_of(app, admin, "c1") == {"tier": "live"}
    assert ok(clear(app, admin, "c1", "tier"))["cleared"] is True
    app.projections.catch_up()
    assert fields_of(app, admin, "c1") == {}


def test_invariant_2_racing_value_applied_in_one_batch_with_delete_and_redefine(
    app: App, admin: User
) -> None:
    # Nothing is projected until every event is in the log: one batch holds them all.
    ok(define(app, admin, "tier"))
    ok(set_value(app, admin, "c1", "tier", "before"))
    ok(delete(app, admin, "tier"))
    ok(define(app, admin, "tier"))
    race_a_stale_value(app, admin, "c1", "tier", 1, "raced")
    app.projections.catch_up()
    assert fields_of(app, admin, "c1") == {}


# --- 3. a rebuild yields exactly the same answers -----------------------------------------


def test_invariant_3_rebuild_yields_the_same_query_answers(app: App, operator: User) -> None:
    tenants = [tenant_admin() for _ in range(3)]
    ok(define(app, operator, "region", "enum", options={"options": ["eu", "us"]}, searchable=True))
    ok(define(app, operator, "gone", "text"))
    for n, user in enumerate(tenants):
        ok(define(app, user, "score", "number", searchable=True, displayOrder=n))
        ok(define(app, user, "tags", "multi_enum", options={"options": ["a", "b", "c"]}))
        ok(define(app, user, "price", "money", entity="deal"))
        for i in range(5):
            entity_id = f"c{i}"
            ok(set_value(app, user, entity_id, "score", i * n))
            ok(set_value(app, user, entity_id, "region", ["eu", "us"][i % 2]))
            ok(set_value(app, user, entity_id, "gone", "x"))
            if i % 3 == 0:
                ok(set_value(app, user, entity_id, "tags", ["c", "a"]))
            if i % 4 == 0:
                ok(clear(app, user, entity_id, "score"))
        ok(
            set_value(
                app, user, "d1", "price", {"amount": "9.99", "currency": "EUR"}, entity="deal"
            )
        )
        ok(
            app.write(
                "update-tenant-field",
                {
                    "entityName": "contact",
                    "fieldKey": "score",
                    "field": {"type": "number"},
                    "label": "S",
                },
                user,
            )
        )
    ok(delete(app, operator, "gone"))
    ok(delete(app, tenants[0], "tags"))
    ok(define(app, tenants[0], "tags", "text"))
    ok(set_value(app, tenants[0], "c1", "tags", "fresh"))
    app.projections.catch_up()

    ids = [f"c{i}" for i in range(5)] + ["d1", "missing"]
    before = snapshot(app, tenants, entities=("contact", "deal"), entity_ids=ids)
    before["where"] = [all_entities(app, u, where={"region": "eu"}) for u in tenants]
    app.projections.rebuild()
    after = snapshot(app, tenants, entities=("contact", "deal"), entity_ids=ids)
    after["where"] = [all_entities(app, u, where={"region": "eu"}) for u in tenants]
    assert after == before
    assert before["where"][1] and before[f"{tenants[0].tenant_id}:contact:c1"]["tags"] == "fresh"

    # and a second rebuild (the swapped-in tables are rebuilt again)
    app.projections.rebuild()
    assert snapshot(app, tenants, entities=("contact", "deal"), entity_ids=ids) == {
        k: v for k, v in before.items() if k != "where"
    }


# --- 4. tenants are isolated ---------------------------------------------------------------


def test_invariant_4_tenants_are_isolated(app: App) -> None:
    a, b = tenant_admin(), tenant_admin()
    b_member = User("bm", b.tenant_id, frozenset({"TenantMember"}))
    ok(define(app, a, "tier", searchable=True))
    ok(set_value(app, a, "c1", "tier", "gold"))
    app.projections.catch_up()

    # definitions: another tenant's answer 404, never 403
    failed(
        app.write(
            "update-tenant-field",
            {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}},
            b,
        ),
        "not_found",
        404,
    )
    failed(delete(app, b, "tier"), "not_found", 404)
    failed(set_value(app, b_member, "c1", "tier", "stolen"), "not_found", 404)
    failed(clear(app, b_member, "c1", "tier"), "not_found", 404)
    assert definitions(app, b) == []
    # values
    failed(
        app.query("get-entity", {"entityName": "contact", "entityId": "c1"}, b_member),
        "not_found",
        404,
    )
    assert all_entities(app, b_member) == []
    failed(
        app.query("list-entities", {"entityName": "contact", "where": {"tier": "gold"}}, b_member),
        "field_not_searchable",
        422,
    )

    # the same key in B is B's own
    ok(define(app, b, "tier", "number"))
    ok(set_value(app, b_member, "c1", "tier", 3))
    app.projections.catch_up()
    assert fields_of(app, a, "c1") == {"tier": "gold"}
    assert fields_of(app, b, "c1") == {"tier": 3}
    ok(delete(app, b, "tier"))
    app.projections.catch_up()
    assert fields_of(app, a, "c1") == {"tier": "gold"}


# --- 5. concurrent defines of one key: one wins, the others get 409 -------------------------


def run_together(apps: Sequence[App], work: Callable[[App, int], Result]) -> list[Result]:
    """Run ``work`` on each app in its own thread, released at once by a barrier."""
    barrier = threading.Barrier(len(apps))
    results: list[Result | BaseException | None] = [None] * len(apps)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(apps[i], i)
        except BaseException as error:  # surfaced below
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(apps))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    finished = [result for result in results if isinstance(result, Result)]
    assert len(finished) == len(apps), results
    return finished


def test_invariant_5_concurrent_defines_of_one_key_one_wins_the_others_409(
    make_app: Callable[..., App], admin: User
) -> None:
    apps = [make_app() for _ in range(4)]  # like separate processes
    for round_ in range(2):
        key = f"tier{round_}"
        results = run_together(
            apps, lambda app, i: define(app, admin, key, "number" if i % 2 else "text")
        )
        assert sum(r.is_success for r in results) == 1, results
        for result in results:
            if not result.is_success:
                failed(result, "version_conflict", 409)
    apps[0].projections.catch_up()
    assert sorted(d["fieldKey"] for d in definitions(apps[0], admin)) == ["tier0", "tier1"]


def test_cap_stays_exact_under_concurrent_defines(
    make_app: Callable[..., App], admin: User
) -> None:
    apps = [make_app(field_definition_limit_per_tenant=3) for _ in range(6)]
    results = run_together(apps, lambda app, i: define(app, admin, f"k{i}"))
    assert sum(r.is_success for r in results) == 3, results
    for result in results:
        if not result.is_success:
            assert failed(result, "cap_exceeded", 422) == {
                "capName": "fieldDefinitionsPerTenant",
                "limit": 3,
                "current": 3,
            }
    apps[0].projections.catch_up()
    assert len(definitions(apps[0], admin)) == 3


# --- 6. the cascade is one set-based statement per read-model table -------------------------


class RecordingCursor:
    def __init__(self, cursor: Any, log: list[str]) -> None:
        self._cursor = cursor
        self._log = log

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)

    @rowcount.setter
    def rowcount(self, value: int) -> None:  # SqlCursor declares a plain attribute
        self._cursor.rowcount = value

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        self._log.append(sql)
        return self._cursor.execute(sql, params)

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any:
        self._log.append("MANY " + sql)
        return self._cursor.executemany(sql, params)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._cursor.fetchall())


class RecordingDatabase:
    """A SqlDatabase around the real one that records every statement it is given."""

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        self.dialect = db.dialect
        self.statements: list[str] = []

    @contextmanager
    def transaction(self) -> Iterator[SqlCursor]:
        with self._db.transaction() as cur:
            yield RecordingCursor(cur, self.statements)

    @contextmanager
    def reading(self) -> Iterator[SqlCursor]:
        with self._db.reading() as cur:
            yield RecordingCursor(cur, self.statements)


def test_invariant_6_cascade_is_one_set_based_statement_per_table(app: App, admin: User) -> None:
    entities = 300
    ok(define(app, admin, "tier"))
    ok(define(app, admin, "keep"))
    store = app.ctx.store
    # many entities, written straight to the store in a few large appends
    now = datetime.now(UTC)
    pending: list[Any] = []
    for i in range(entities):
        entity = EntityCustomFields(entity_stream_id(admin.tenant_id, "contact", f"c{i:04}"))
        for key in ("tier", "keep"):
            sealed, digest = seal_value(
                app.ctx,
                admin.tenant_id,
                entity_name="contact",
                entity_id=f"c{i:04}",
                field_key=key,
                value="v",
            )
            entity.set_value(
                tenant_id=admin.tenant_id,
                entity_name="contact",
                entity_id=f"c{i:04}",
                field_key=key,
                definition_id=definition_id(admin.tenant_id, "contact", key),
                generation=1,
                sealed=sealed,
                digest=digest,
                now=now,
            )
        pending += entity.collect()
        if len(pending) >= 200:
            store.append(pending)
            pending = []
    store.append(pending)
    app.projections.catch_up()
    ok(delete(app, admin, "tier"))

    serving = app.projections
    assert isinstance(serving, ProjectionRunner)
    recording = RecordingDatabase(serving.db)
    runner = ProjectionRunner(recording, serving.log, [CustomFieldsProjection()])
    assert runner.catch_up() == 2  # FieldDefinitionDeleted + FieldSlotReleased

    values, defs = TABLES["entity_values"], TABLES["definitions"]
    touching_values = [s for s in recording.statements if values in s]
    assert len(touching_values) == 1, touching_values
    (cascade,) = touching_values
    assert cascade.lstrip().upper().startswith(f"UPDATE {values.upper()}")
    if serving.db.dialect == "postgresql":
        assert "fields - " in cascade
    else:
        assert "json_remove(" in cascade
    touching_defs = [s for s in recording.statements if defs in s and values not in s]
    assert len(touching_defs) == 1 and touching_defs[0].lstrip().upper().startswith("UPDATE")
    assert not any(s.startswith("MANY") for s in recording.statements)

    assert keys_everywhere(app, admin, ["c0000", f"c{entities - 1:04}"]) == {"keep"}
    assert len(all_entities(app, admin, limit=500)) == entities


def test_invariant_5_concurrent_defines_in_one_app_share_commits_one_wins_the_others_409(
    app: App, admin: User
) -> None:
    # Threads of one app: their appends meet in one group commit.
    for round_ in range(3):
        key = f"tier{round_}"
        results = run_together(
            [app] * 6, lambda app, i: define(app, admin, key, "number" if i % 2 else "text")
        )
        assert sum(r.is_success for r in results) == 1, results
        for result in results:
            if not result.is_success:
                failed(result, "version_conflict", 409)
    app.projections.catch_up()
    assert sorted(d["fieldKey"] for d in definitions(app, admin)) == ["tier0", "tier1", "tier2"]
    catalog = app.ctx.store.load(catalog_id(admin.tenant_id))
    assert len(catalog) == 3, "one slot claimed per key"
