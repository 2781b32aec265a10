"""The change feed on both backends: public shapes, per-tenant gap-free sequences,
exactly once under concurrent writers and a tailing reader, replay from any sequence,
tenant isolation, and identical ids and sequences after a rebuild."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from application import User
from application.app import App
from infrastructure.bootstrap import projection_runner
from tests.support.results import failed, ok

FIELD = {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}}


def admin_of(tenant: str) -> User:
    return User(id="admin-" + tenant, tenant_id=tenant, roles=frozenset({"TenantAdmin"}))


def feed(app: App, user: User, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
    app.projections.catch_up()
    items: list[dict[str, Any]] = ok(app.feed.read(user, after=after, limit=limit))["items"]
    return items


def set_value(app: App, user: User, entity: str, value: str) -> None:
    ok(
        app.write(
            "set-custom-field",
            {"entityName": "contact", "entityId": entity, "fieldKey": "tier", "value": value},
            user,
        )
    )


def connect_account(app: App, admin: User) -> str:
    payload = {
        "provider": "imap",
        "displayName": "Support desk",
        "address": "desk@example.org",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": "127.0.0.1", "port": 1, "security": "none", "username": "desk"},
        "secret": "pw",
    }
    return str(ok(app.write("connect-mail-account", payload, admin))["accountId"])


def ingest(app: App, operator: User, account_id: str, provider_id: str) -> str:
    data = ok(
        app.write(
            "ingest-message",
            {
                "accountId": account_id,
                "providerMessageId": provider_id,
                "messageIdHeader": f"<{provider_id}@example.org>",
                "references": [],
                "from": [{"name": "Ann", "address": "ann@example.org"}],
                "to": [{"name": "", "address": "desk@example.org"}],
                "cc": [],
                "subject": "Order 42 is late",
                "snippet": "Hello, my order",
                "receivedAt": "2024-05-01T10:00:00+02:00",
                "bodyRef": None,
                "sizeBytes": 1234,
                "folder": "INBOX",
            },
            operator,
        )
    )
    return str(data["messageId"])


def test_each_kind_of_change_is_an_item_with_its_public_shape(
    app: App, admin: User, operator: User
) -> None:
    ok(app.write("define-tenant-field", FIELD, admin))
    set_value(app, admin, "c1", "gold")
    ok(
        app.write(
            "clear-custom-field",
            {"entityName": "contact", "entityId": "c1", "fieldKey": "tier"},
            admin,
        )
    )
    account_id = connect_account(app, admin)
    message_id = ingest(app, operator, account_id, "emailid:M1")
    ok(app.write("disconnect-mail-account", {"accountId": account_id}, admin))
    ok(app.write("delete-tenant-field", {"entityName": "contact", "fieldKey": "tier"}, admin))

    items = feed(app, admin)
    assert [i["type"] for i in items] == [
        "custom_field.defined",
        "custom_field_value.set",
        "custom_field_value.cleared",
        "mail_account.connected",
        "message.received",
        "mail_account.disconnected",
        "custom_field.deleted",
    ]
    assert [i["sequence"] for i in items] == list(range(1, 8))
    assert {i["tenantId"] for i in items} == {admin.tenant_id}
    assert len({i["id"] for i in items}) == 7
    assert items[1]["data"] == {
        "entityName": "contact",
        "entityId": "c1",
        "fieldKey": "tier",
        "value": "gold",
    }
    assert items[3]["data"]["address"] == "desk@example.org"
    assert items[3]["data"]["displayName"] == "Support desk"
    received = items[4]["data"]
    assert received["messageId"] == message_id and received["accountId"] == account_id
    assert received["subject"] == "Order 42 is late"
    assert received["from"] == [{"name": "Ann", "address": "ann@example.org"}]
    assert received["state"] == "ok"
    assert {"tenantId", "providerMessageId", "bodyRef"}.isdisjoint(received)


def test_personal_data_stays_sealed_in_the_feed_table(
    app: App, admin: User, operator: User
) -> None:
    account_id = connect_account(app, admin)
    ingest(app, operator, account_id, "emailid:M1")
    app.projections.catch_up()
    db = projection_runner(app).db
    with db.reading() as cur:
        cur.execute("SELECT data FROM feed_items")
        stored = " ".join(str(row[0]) for row in cur.fetchall())
    assert "Order 42" not in stored and "ann@example.org" not in stored
    assert "desk@example.org" not in stored


def test_tenants_see_only_their_own_items_and_members_none(
    app: App, admin: User, member: User
) -> None:
    other = admin_of("t-" + uuid.uuid4().hex[:8])
    ok(app.write("define-tenant-field", FIELD, admin))
    ok(app.write("define-tenant-field", FIELD, other))
    set_value(app, other, "x", "theirs")
    assert [i["type"] for i in feed(app, admin)] == ["custom_field.defined"]
    assert [i["sequence"] for i in feed(app, other)] == [1, 2]
    failed(app.feed.read(member), "forbidden", 403)


def test_replay_from_any_sequence_gives_the_same_items(app: App, admin: User) -> None:
    ok(app.write("define-tenant-field", FIELD, admin))
    for n in range(12):
        set_value(app, admin, f"c{n}", str(n))
    everything = feed(app, admin)
    for after in range(len(everything) + 1):
        assert feed(app, admin, after=after) == everything[after:]
    pages: list[dict[str, Any]] = []
    after = 0
    while page := ok(app.feed.read(admin, after=after, limit=5))["items"]:
        pages.extend(page)
        after = ok(app.feed.read(admin, after=after, limit=5))["nextAfter"]
    assert pages == everything


def test_exactly_once_under_concurrent_writers_and_a_tailing_reader(  # noqa: C901
    make_app: Callable[..., App],
) -> None:
    tenants = [admin_of("t-" + uuid.uuid4().hex[:8]) for _ in range(3)]
    writers_app, reader_app = make_app(), make_app()
    for admin in tenants:
        ok(writers_app.write("define-tenant-field", FIELD, admin))
    per_writer = 15
    done = threading.Event()
    seen: dict[str, list[dict[str, Any]]] = {a.tenant_id: [] for a in tenants}

    def write(admin: User, n: int) -> None:
        app = make_app()
        for i in range(per_writer):
            set_value(app, admin, f"w{n}-{i}", str(i))

    def tail() -> None:
        while True:
            finished = done.is_set()
            reader_app.projections.catch_up()
            for admin in tenants:
                after = seen[admin.tenant_id][-1]["sequence"] if seen[admin.tenant_id] else 0
                seen[admin.tenant_id] += ok(reader_app.feed.read(admin, after=after))["items"]
            if finished:
                return

    threads = [
        threading.Thread(target=write, args=(admin, n)) for n, admin in enumerate(tenants * 2)
    ]
    reader = threading.Thread(target=tail)
    reader.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    reader.join(60)
    for admin in tenants:
        items = seen[admin.tenant_id]
        assert [i["sequence"] for i in items] == list(range(1, 2 + 2 * per_writer))
        assert len({i["id"] for i in items}) == len(items)
        assert sum(i["type"] == "custom_field_value.set" for i in items) == 2 * per_writer


def test_a_rebuild_yields_the_same_ids_and_sequences(app: App, admin: User, operator: User) -> None:
    ok(app.write("define-tenant-field", FIELD, admin))
    set_value(app, admin, "c1", "gold")
    account_id = connect_account(app, admin)
    ingest(app, operator, account_id, "emailid:M1")
    before = feed(app, admin)
    app.projections.rebuild()
    assert feed(app, admin) == before
