"""Host projections on both backends, with a host table the test creates: a
``HostCustomFieldsColumn`` keeps ``contacts.custom_fields`` in step with the values
(set, clear, plaintext from sealed events), the cascade of tenant and system deletes,
rebuilds in place to the same column, quarantines what the host's table refuses, and
shows in the status; bad or taken names and table names are refused at bootstrap."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from application import User
from application.app import App
from application.ports import Dialect, Recorded, SqlCursor, SqlDatabase
from infrastructure import bootstrap as wiring
from projections.base import InvalidProjection, shadow_tables
from tests.integration.custom_fields.helpers import clear, define, delete, fields_of, set_value
from tests.support.host_tables import NAME, add_contact, columns, contacts_column, create_contacts
from tests.support.results import ok

BUILT_IN = ["custom_fields", "mail", "feed", "mail_outbound"]


def host_app(make_app: Callable[..., App], *, max_json: int | None = None, **settings: Any) -> App:
    """An app whose database already holds the host's ``contacts`` table, then an app
    (a host process) registering the column projection on it."""
    plain = make_app()
    create_contacts(db_of(plain), max_json=max_json)
    return make_app(projections=[contacts_column()], **settings)


def db_of(app: App) -> SqlDatabase:
    return wiring.projection_runner(app).db


def other(tenant: str, suffix: str) -> User:
    return User(id="u-" + suffix, tenant_id=f"{tenant}-{suffix}", roles=frozenset({"TenantAdmin"}))


def test_values_set_and_cleared_reach_the_host_column_in_plaintext_per_tenant(
    make_app: Callable[..., App], admin: User
) -> None:
    app = host_app(make_app)
    db, friend = db_of(app), other(admin.tenant_id, "friend")
    for user in (admin, friend):
        add_contact(db, user.tenant_id, "c1")
        ok(define(app, user, "tier"))
        ok(define(app, user, "score", "number"))
    add_contact(db, admin.tenant_id, "c2")
    hostile = '\'); DROP TABLE contacts; -- {"tier": 1}'
    ok(set_value(app, admin, "c1", "tier", "gold"))
    ok(set_value(app, admin, "c1", "score", 7))
    ok(set_value(app, admin, "c2", "tier", hostile))
    ok(set_value(app, friend, "c1", "tier", "tin"))
    ok(set_value(app, admin, "no-such-row", "tier", "lost"))  # the host has no row for it
    app.projections.catch_up()
    assert columns(db) == {
        (admin.tenant_id, "c1"): {"tier": "gold", "score": 7},
        (admin.tenant_id, "c2"): {"tier": hostile},
        (friend.tenant_id, "c1"): {"tier": "tin"},
    }
    ok(clear(app, admin, "c1", "tier"))
    ok(set_value(app, admin, "c2", "tier", "silver"))
    app.projections.catch_up()
    assert columns(db)[(admin.tenant_id, "c1")] == {"score": 7}
    assert columns(db)[(admin.tenant_id, "c2")] == {"tier": "silver"}
    assert columns(db)[(friend.tenant_id, "c1")] == {"tier": "tin"}
    # the sealed events hold no plaintext: the column is opened with the tenant's key
    assert fields_of(app, admin, "c2") == {"tier": "silver"}


def test_a_tenant_delete_cascades_to_its_rows_only(
    make_app: Callable[..., App], admin: User
) -> None:
    app = host_app(make_app)
    db, friend = db_of(app), other(admin.tenant_id, "friend")
    for user in (admin, friend):
        ok(define(app, user, "tier"))
        ok(define(app, user, "keep"))
        for cid in ("c1", "c2"):
            add_contact(db, user.tenant_id, cid)
            ok(set_value(app, user, cid, "tier", "t-" + cid))
            ok(set_value(app, user, cid, "keep", "k"))
    ok(delete(app, admin, "tier"))
    app.projections.catch_up()
    assert columns(db) == {
        (admin.tenant_id, "c1"): {"keep": "k"},
        (admin.tenant_id, "c2"): {"keep": "k"},
        (friend.tenant_id, "c1"): {"tier": "t-c1", "keep": "k"},
        (friend.tenant_id, "c2"): {"tier": "t-c2", "keep": "k"},
    }
    # a value of the deleted generation replayed later does not land; a new one does
    ok(define(app, admin, "tier"))
    ok(set_value(app, admin, "c1", "tier", "new"))
    app.projections.catch_up()
    assert columns(db)[(admin.tenant_id, "c1")] == {"keep": "k", "tier": "new"}


def test_a_system_delete_cascades_to_every_tenant(
    make_app: Callable[..., App], admin: User, operator: User
) -> None:
    app = host_app(make_app)
    db, friend = db_of(app), other(admin.tenant_id, "friend")
    ok(define(app, operator, "region"))
    for user in (admin, friend):
        ok(define(app, user, "own"))
        add_contact(db, user.tenant_id, "c1")
        ok(set_value(app, user, "c1", "region", "eu"))
        ok(set_value(app, user, "c1", "own", "o"))
    app.projections.catch_up()
    assert columns(db)[(friend.tenant_id, "c1")] == {"region": "eu", "own": "o"}
    ok(delete(app, operator, "region"))
    app.projections.catch_up()
    assert columns(db) == {
        (admin.tenant_id, "c1"): {"own": "o"},
        (friend.tenant_id, "c1"): {"own": "o"},
    }


def test_a_rebuild_in_place_restores_the_same_column(
    make_app: Callable[..., App], admin: User, operator: User
) -> None:
    app = host_app(make_app)
    db = db_of(app)
    ok(define(app, operator, "region"))
    ok(define(app, admin, "tier", "number"))
    ok(define(app, admin, "gone"))
    for n in range(30):
        cid = f"c{n:02d}"
        add_contact(db, admin.tenant_id, cid)
        ok(set_value(app, admin, cid, "tier", n))
        ok(set_value(app, admin, cid, "gone", "g"))
        if n % 3 == 0:
            ok(set_value(app, admin, cid, "region", "eu"))
        if n % 5 == 0:
            ok(clear(app, admin, cid, "tier"))
    ok(delete(app, admin, "gone"))
    app.projections.catch_up()
    before = columns(db)
    assert before[(admin.tenant_id, "c03")] == {"tier": 3, "region": "eu"}
    assert before[(admin.tenant_id, "c05")] == {}
    # the host (or a bug) damages the column: a rebuild of this projection repairs it
    with db.transaction() as cur:
        cur.execute("UPDATE contacts SET custom_fields = NULL WHERE id < 'c10'")
        cur.execute(
            "UPDATE contacts SET custom_fields = ? WHERE id >= 'c20'",
            ('{"junk": 1}',),
        )
    app.projections.rebuild(NAME)
    assert columns(db) == before
    # a whole rebuild (built-in shadows and this in place) answers the same again
    app.projections.rebuild()
    assert columns(db) == before
    assert {s.name: s.lag for s in app.projections.status()}[NAME] == 0
    ok(set_value(app, admin, "c05", "tier", 99))
    app.projections.catch_up()
    assert columns(db)[(admin.tenant_id, "c05")] == {"tier": 99}


def test_a_value_the_host_table_refuses_is_quarantined_for_the_host_projection_alone(
    make_app: Callable[..., App], admin: User
) -> None:
    app = host_app(make_app, max_json=200)
    db = db_of(app)
    ok(define(app, admin, "note"))
    for cid in ("c1", "c2"):
        add_contact(db, admin.tenant_id, cid)
    ok(set_value(app, admin, "c1", "note", "x" * 500))  # over the host's own CHECK
    ok(set_value(app, admin, "c2", "note", "short"))
    app.projections.catch_up()
    status = {s.name: s for s in app.projections.status()}
    assert {name: s.quarantined for name, s in status.items()} == {
        "custom_fields": 0,
        "mail": 0,
        "feed": 0,
        "mail_outbound": 0,
        NAME: 1,
    }
    assert status[NAME].lag == 0
    (held,) = wiring.projection_runner(app).quarantined(NAME)
    assert (held.tenant_id, held.topic) == (admin.tenant_id, "tidings.fields.CustomFieldValueSet")
    assert columns(db) == {
        (admin.tenant_id, "c1"): None,
        (admin.tenant_id, "c2"): {"note": "short"},
    }
    assert fields_of(app, admin, "c1") == {"note": "x" * 500}  # the built-in model has it
    # a rebuild offers it again: still refused, still held once, the rest rebuilt
    app.projections.rebuild(NAME)
    assert [q.position for q in wiring.projection_runner(app).quarantined(NAME)] == [held.position]
    assert columns(db)[(admin.tenant_id, "c2")] == {"note": "short"}


def test_after_a_tenant_shred_a_rebuild_leaves_no_plaintext_in_the_host_table(
    make_app: Callable[..., App], admin: User, operator: User
) -> None:
    app = host_app(make_app)
    db = db_of(app)
    ok(define(app, admin, "tier"))
    add_contact(db, admin.tenant_id, "c1")
    ok(set_value(app, admin, "c1", "tier", "secret"))
    app.projections.catch_up()
    assert columns(db) == {(admin.tenant_id, "c1"): {"tier": "secret"}}
    ok(app.write("shred-tenant", {"tenantId": admin.tenant_id}, operator))
    app.projections.rebuild(NAME)
    assert columns(db) == {(admin.tenant_id, "c1"): {"tier": "[erased]"}}


def test_the_settings_name_host_projections_for_every_process(
    make_app: Callable[..., App], admin: User
) -> None:
    plain = make_app()
    create_contacts(db_of(plain))
    app = make_app(host_projections="tests.support.host_tables:contacts_column")
    assert [s.name for s in app.projections.status()] == [*BUILT_IN, NAME]
    add_contact(db_of(app), admin.tenant_id, "c1")
    ok(define(app, admin, "tier"))
    ok(set_value(app, admin, "c1", "tier", "gold"))
    app.projections.catch_up()
    assert columns(db_of(app)) == {(admin.tenant_id, "c1"): {"tier": "gold"}}


class Owning:
    """A host projection over tables of its own (so it rebuilds through shadows)."""

    def __init__(self, name: str, tables: dict[str, str]) -> None:
        self.name = name
        self.tables = tables

    def shadow(self) -> Owning:
        return Owning(self.name + "__next", shadow_tables(self.tables))

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        for table in self.tables.values():
            cur.execute(f"CREATE TABLE {table} (position BIGINT PRIMARY KEY)")

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: list[Recorded]) -> None:
        for recorded in batch:
            cur.execute(
                f"INSERT INTO {self.tables['t']} (position) VALUES (?)", (recorded.position,)
            )


def test_an_owning_host_projection_runs_and_rebuilds_through_shadows(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app(projections=[Owning("host_positions", {"t": "host_positions"})])
    ok(define(app, admin, "tier"))
    ok(set_value(app, admin, "c1", "tier", "gold"))
    app.projections.catch_up()
    db = db_of(app)

    def positions() -> list[int]:
        with db.reading() as cur:
            cur.execute("SELECT position FROM host_positions ORDER BY position")
            return [int(row[0]) for row in cur.fetchall()]

    head = wiring.event_store(app).head()
    assert positions() == list(range(1, head + 1))
    app.projections.rebuild("host_positions")
    assert positions() == list(range(1, head + 1))


@pytest.mark.parametrize(
    ("name", "tables", "says"),
    [
        ("feed", {"t": "host_x"}, "already taken"),
        ("custom_fields", {"t": "host_x"}, "already taken"),
        ("mine__next", {"t": "host_x"}, "may not end"),
        ("Bad-Name", {"t": "host_x"}, "must match"),
        ("x; DROP TABLE projection_tracking", {"t": "host_x"}, "must match"),
        ("mine", {"t": "cf_definitions"}, "another projection's"),
        ("mine", {"t": "feed_items"}, "another projection's"),
        ("mine", {"t": "host_x; DROP TABLE feed_items"}, "plain SQL identifier"),
    ],
)
def test_bad_or_taken_names_are_refused_at_bootstrap(
    make_app: Callable[..., App], name: str, tables: dict[str, str], says: str
) -> None:
    make_app()
    with pytest.raises(InvalidProjection, match=says):
        make_app(projections=[Owning(name, tables)])
    app = make_app()  # nothing of the refused one was written
    assert [s.name for s in app.projections.status()] == BUILT_IN


def test_two_host_projections_may_not_share_a_name(make_app: Callable[..., App]) -> None:
    with pytest.raises(InvalidProjection, match="already taken"):
        make_app(projections=[Owning("mine", {"t": "host_a"}), Owning("mine", {"t": "host_b"})])


def test_a_missing_host_table_or_a_text_column_fails_bootstrap_loudly(
    make_app: Callable[..., App], database_url: str
) -> None:
    plain = make_app()
    with pytest.raises(Exception, match="contacts"):
        make_app(projections=[contacts_column()])
    if database_url.startswith("postgresql"):
        with db_of(plain).transaction() as cur:
            cur.execute(
                "CREATE TABLE contacts (tenant_id TEXT, id TEXT, name TEXT, custom_fields TEXT)"
            )
        with pytest.raises(InvalidProjection, match="jsonb"):
            make_app(projections=[contacts_column()])


def documented_example() -> dict[str, Any]:
    """The module that docs/host-projections.md shows as its complete example, run."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "host-projections.md").read_text()
    section = text[text.index("## A complete example") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    module: dict[str, Any] = {"__name__": "myapp_read_models"}
    exec(compile(code[: code.index("```")], "host-projections.md", "exec"), module)
    return module


def test_the_documented_example_runs_and_rebuilds(
    make_app: Callable[..., App], admin: User
) -> None:
    example = documented_example()
    app = make_app(projections=example["projections"]())
    ok(define(app, admin, "tier"))
    for cid in ("c1", "c2", "c3"):
        ok(set_value(app, admin, cid, "tier", "gold"))
    ok(clear(app, admin, "c2", "tier"))
    app.projections.catch_up()
    db = db_of(app)

    def activity() -> list[tuple[Any, ...]]:
        with db.reading() as cur:
            cur.execute("SELECT tenant_id, entity_name, sets, clears FROM myapp_field_activity")
            return [tuple(row) for row in cur.fetchall()]

    assert activity() == [(admin.tenant_id, "contact", 3, 1)]
    assert "myapp_field_activity" in [s.name for s in app.projections.status()]
    app.projections.rebuild("myapp_field_activity")
    assert activity() == [(admin.tenant_id, "contact", 3, 1)]


def test_writes_during_a_rebuild_in_place_are_neither_lost_nor_applied_twice(
    make_app: Callable[..., App], admin: User
) -> None:
    app = host_app(make_app)
    db = db_of(app)
    ok(define(app, admin, "n", "number"))
    ids = [f"c{i:02d}" for i in range(20)]
    for cid in ids:
        add_contact(db, admin.tenant_id, cid)
        ok(set_value(app, admin, cid, "n", 0))
    app.projections.catch_up()
    writer = make_app()  # another process writing while this one rebuilds
    failures: list[str] = []

    def write() -> None:
        for round_ in range(1, 4):
            for cid in ids:
                result = set_value(writer, admin, cid, "n", round_)
                if result.error is not None:
                    failures.append(result.error.code)

    thread = threading.Thread(target=write)
    thread.start()
    app.projections.rebuild(NAME)
    thread.join()
    app.projections.catch_up()
    assert failures == []
    # the built-in read model is the reference: the host column says the same, row by row
    assert columns(db) == {(admin.tenant_id, cid): fields_of(app, admin, cid) for cid in ids}
    assert all(fields == {"n": 3} for fields in columns(db).values())
