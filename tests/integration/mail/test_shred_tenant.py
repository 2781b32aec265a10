"""A tenant can be erased: custom-field values are sealed in events and read models (a
keyed digest serves equality filters), and ``shred-tenant`` destroys the tenant's keys,
after which no plaintext of it remains anywhere but ids and every read answers erased."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from application import SYSTEM_TENANT_ID, User
from application.app import App
from application.streams import commit
from domain.custom_field_values import CustomFieldValueSet, EntityCustomFields, entity_stream_id
from domain.field_definition import definition_id
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import accounts, connect, messages, raw_mail
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.dump import dump_database
from tests.support.results import failed, ok

OPERATOR = User(id="operator", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
FIELDS = {
    "nick": {"type": "text"},
    "contact": {"type": "email"},
    "score": {"type": "number"},
    "budget": {"type": "money"},
    "site": {"type": "url"},
}


def _values(marker: str) -> dict[str, Any]:
    return {
        "nick": f"Nick {marker}",
        "contact": f"person.{marker}@example.com",
        "score": 918273.5,
        "budget": {"amount": "4817.25", "currency": "EUR"},
        "site": f"https://{marker}.example.org/page",
    }


def _seed_fields(app: App, user: User, marker: str) -> dict[str, Any]:
    for key, spec in FIELDS.items():
        ok(
            app.write(
                "define-tenant-field",
                {"entityName": "contact", "fieldKey": key, "field": spec, "searchable": True},
                user,
            )
        )
    values = _values(marker)
    for entity_id in ("c1", "c2"):
        for key, value in values.items():
            payload = {"entityName": "contact", "entityId": entity_id, "fieldKey": key}
            ok(app.write("set-custom-field", {**payload, "value": value}, user))
    ok(
        app.write(
            "clear-custom-field",
            {"entityName": "contact", "entityId": "c2", "fieldKey": "site"},
            user,
        )
    )
    return values


def _entity(app: App, user: User, entity_id: str) -> dict[str, Any]:
    found = ok(app.query("get-entity", {"entityName": "contact", "entityId": entity_id}, user))
    fields: dict[str, Any] = found["customFields"]
    return fields


def _where(app: App, user: User, **where: Any) -> list[str]:
    page = ok(app.query("list-entities", {"entityName": "contact", "where": where}, user))
    return [item["entityId"] for item in page["items"]]


def _plaintexts(marker: str) -> list[str]:
    # Every value above carries the marker, or is a number/amount spelled nowhere else.
    return [marker, "918273.5", "4817.25"]


def _scan(database_url: str, mail: MailApp, needles: list[str]) -> list[str]:
    found = [
        f"{needle!r} in table {table}"
        for table, text in dump_database(database_url)
        for needle in needles
        if needle in text
    ]
    root = mail.app.ctx.mail.blobs.root  # type: ignore[attr-defined]
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{n!r} in blob {path.name}" for n in needles if n.encode() in data]
    return found


def test_values_are_sealed_and_filters_work_on_digests(
    mail: MailApp, admin: User, database_url: str
) -> None:
    app, marker = mail.app, uuid.uuid4().hex[:12]
    values = _seed_fields(app, admin, marker)
    app.projections.catch_up()
    assert _entity(app, admin, "c1") == values
    assert _entity(app, admin, "c2") == {k: v for k, v in values.items() if k != "site"}
    assert _where(app, admin, nick=values["nick"]) == ["c1", "c2"]
    assert _where(app, admin, score=918273.5, site=values["site"]) == ["c1"]
    assert _where(app, admin, budget={"currency": "EUR", "amount": "4817.25"}) == ["c1", "c2"]
    assert _where(app, admin, nick="someone else") == []
    # An integer filter finds the float it equals, as before sealing.
    ok(app.write("set-custom-field", _set("c3", "score", 7.0), admin))
    app.projections.catch_up()
    assert _where(app, admin, score=7) == ["c3"]
    # Neither the events nor the read models hold a value in plaintext.
    assert _scan(database_url, mail, _plaintexts(marker)) == []
    # After a rebuild the same answers.
    app.projections.rebuild()
    assert _entity(app, admin, "c1") == values
    assert _where(app, admin, nick=values["nick"]) == ["c1", "c2"]


def _set(entity_id: str, key: str, value: Any) -> dict[str, Any]:
    return {"entityName": "contact", "entityId": entity_id, "fieldKey": key, "value": value}


def test_a_value_token_copied_to_another_entity_or_tenant_reads_as_erased(
    mail: MailApp, admin: User
) -> None:
    app = mail.app
    other = User(id="o", tenant_id="t-" + uuid.uuid4().hex[:8], roles=frozenset({"TenantAdmin"}))
    for user in (admin, other):
        ok(
            app.write(
                "define-tenant-field",
                {"entityName": "contact", "fieldKey": "nick", "field": {"type": "text"}},
                user,
            )
        )
    ok(app.write("set-custom-field", _set("c1", "nick", "the victim's value"), admin))
    ok(app.write("set-custom-field", _set("c2", "nick", "mine"), admin))
    ok(app.write("set-custom-field", _set("c9", "nick", "the attacker's"), other))
    app.projections.catch_up()
    db = app.ctx.mail.read_model.db  # type: ignore[attr-defined]
    with db.transaction() as cur:
        cur.execute(
            "SELECT fields FROM cf_entity_values WHERE tenant_id = ? AND entity_id = 'c1'",
            (admin.tenant_id,),
        )
        (victim_cells,) = cur.fetchone()
        victim_cells = victim_cells if isinstance(victim_cells, str) else json.dumps(victim_cells)
        cur.execute(
            "UPDATE cf_entity_values SET fields = ? WHERE tenant_id = ? AND entity_id = 'c9'",
            (victim_cells, other.tenant_id),
        )
        cur.execute(
            "UPDATE cf_entity_values SET fields = ? WHERE tenant_id = ? AND entity_id = 'c2'",
            (victim_cells, admin.tenant_id),
        )
    assert _entity(app, other, "c9") == {"nick": "[erased]"}  # another tenant's token
    assert _entity(app, admin, "c2") == {"nick": "[erased]"}  # another entity's token
    assert _entity(app, admin, "c1") == {"nick": "the victim's value"}

    # The same through the log: an event of the other tenant carrying the victim's token
    # (and digest) projects, and reads as erased; its filter does not find it either.
    [victim_event] = [
        e for e in _value_events(app) if e.tenant_id == admin.tenant_id and e.entity_id == "c1"
    ]
    stream = entity_stream_id(other.tenant_id, "contact", "c7")
    forged = EntityCustomFields(stream)
    forged.set_value(
        tenant_id=other.tenant_id,
        entity_name="contact",
        entity_id="c7",
        field_key="nick",
        definition_id=definition_id(other.tenant_id, "contact", "nick"),
        generation=1,
        sealed=victim_event.sealed,
        digest=victim_event.digest,
        now=victim_event.timestamp,
    )
    commit(app.ctx.store, forged)
    app.projections.catch_up()
    assert _entity(app, other, "c7") == {"nick": "[erased]"}


def _value_events(app: App) -> list[CustomFieldValueSet]:
    store: Any = app.ctx.store
    found: list[CustomFieldValueSet] = []
    position = 0
    while batch := store.read(position, 1000):
        found += [r.event for r in batch if isinstance(r.event, CustomFieldValueSet)]
        position = batch[-1].position
    return found


def test_shredding_a_tenant_leaves_no_plaintext_and_reads_as_erased(
    make_mail_app: MakeMailApp,
    admin: User,
    tenant: str,
    database_url: str,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    mail = make_mail_app()
    app, marker, kept_marker = mail.app, uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    values = _seed_fields(app, admin, marker)
    other = User(id="o", tenant_id="t-" + uuid.uuid4().hex[:8], roles=frozenset({"TenantAdmin"}))
    other_values = _seed_fields(app, other, kept_marker)
    box, other_box = new_mailbox(), new_mailbox()
    dovecot.deliver(box, [raw_mail(1, subject=f"subject {marker}", body=f"body {marker}")])
    dovecot.deliver(other_box, [raw_mail(2, subject=f"subject {kept_marker}")])
    account = connect(app, admin, dovecot, box, address=f"owner.{marker}@mail.example")
    other_account = connect(app, other, dovecot, other_box, address=f"k.{kept_marker}@m.example")
    mail.poll()
    app.projections.catch_up()
    [message] = messages(app, admin, accountId=account)
    assert message["subject"] == f"subject {marker}"

    # Only the operator, from the system tenant, may shred; never the system tenant.
    failed(app.write("shred-tenant", {"tenantId": tenant}, admin), "forbidden", 403)
    elsewhere = User(id="x", tenant_id=other.tenant_id, roles=frozenset({"SystemAdmin"}))
    failed(app.write("shred-tenant", {"tenantId": tenant}, elsewhere), "forbidden", 403)
    failed(
        app.write("shred-tenant", {"tenantId": SYSTEM_TENANT_ID}, OPERATOR),
        "system_tenant_not_allowed",
        422,
    )
    assert _entity(app, admin, "c1") == values

    shredded = ok(app.write("shred-tenant", {"tenantId": tenant}, OPERATOR))
    assert shredded == {"tenantId": tenant, "shredded": True}
    ok(app.write("shred-tenant", {"tenantId": tenant}, OPERATOR))  # idempotent

    # No plaintext of the tenant anywhere: every table of the store, every blob file.
    assert _scan(database_url, mail, [*_plaintexts(marker), box.password, box.name]) == []
    # Reads answer erased, in this process and in a fresh one (its own key cache).
    for reader in (app, make_mail_app().app):
        assert _entity(reader, admin, "c1") == dict.fromkeys(values, "[erased]")
        assert _where(reader, admin, nick=values["nick"]) == []
        listed = accounts(reader, admin)[account]
        assert listed["address"] == listed["displayName"] == "[erased]"
        [gone] = messages(reader, admin, accountId=account)
        assert gone["from"] == [] and not gone["subject"]
        raw = ok(reader.query("get-message", {"messageId": gone["messageId"]}, admin))
        assert raw["raw"] is None
        assert reader.ctx.mail.secrets.get(account) is None
        # Writes that would seal under the shredded key answer 410.
        failed(reader.write("set-custom-field", _set("c1", "nick", "again"), admin), "erased", 410)
    # The other tenant is untouched.
    assert _entity(app, other, "c1") == other_values
    assert _where(app, other, nick=other_values["nick"]) == ["c1", "c2"]
    assert accounts(app, other)[other_account]["address"] == f"k.{kept_marker}@m.example"
    assert messages(app, other)[0]["subject"] == f"subject {kept_marker}"
