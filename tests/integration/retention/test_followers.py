"""What follows the log follows expiries, on both backends: a host's
``HostCustomFieldsColumn`` (anonymized in plaintext, deleted, rebuilt the same), the
change feed (``custom_field_value.expired`` in order, the anonymous form served opened)
and a webhook receiving the expiries in order, signed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from application import User
from application.app import App
from application.webhooks.signature import verify_signature
from infrastructure import bootstrap as wiring
from tests.integration.custom_fields.helpers import set_value
from tests.integration.retention.support import MovingClock, define_kept, on_clock, sweep
from tests.integration.webhooks.helpers import create_webhook, deliveries, delivering, eventually
from tests.support.host_tables import add_contact, columns, contacts_column, create_contacts
from tests.support.results import ok
from tests.support.webhook_receiver import Receiver


@pytest.fixture
def clock() -> MovingClock:
    return MovingClock()


def test_the_host_column_follows_expiries_and_rebuilds_the_same(
    make_app: Callable[..., App], clock: MovingClock, admin: User
) -> None:
    plain = make_app()
    create_contacts(wiring.projection_runner(plain).db)
    app = on_clock(make_app, clock, projections=[contacts_column()])
    db = wiring.projection_runner(app).db
    for contact in ("c1", "c2"):
        add_contact(db, admin.tenant_id, contact)
    define_kept(app, admin, "note", action="anonymize")
    define_kept(app, admin, "email", "email", action="anonymize")
    define_kept(app, admin, "score", "number", action="anonymize")
    define_kept(app, admin, "tier", keep_for="60d")
    for contact in ("c1", "c2"):
        ok(set_value(app, admin, contact, "note", f"about {contact}"))
        ok(set_value(app, admin, contact, "email", f"{contact}@example.com"))
        ok(set_value(app, admin, contact, "score", 3))
        ok(set_value(app, admin, contact, "tier", "gold"))
    clock.move(days=31)
    assert sweep(app) == 6
    anonymized = {"note": "[anonymized]", "email": "anonymized@invalid", "tier": "gold"}
    assert columns(db) == {(admin.tenant_id, c): anonymized for c in ("c1", "c2")}
    clock.move(days=30)
    assert sweep(app) == 2
    after = {"note": "[anonymized]", "email": "anonymized@invalid"}
    assert columns(db) == {(admin.tenant_id, c): after for c in ("c1", "c2")}
    app.projections.rebuild()
    assert columns(db) == {(admin.tenant_id, c): after for c in ("c1", "c2")}


def test_the_feed_says_expired_in_order_with_the_anonymous_form_opened(
    make_app: Callable[..., App], clock: MovingClock, admin: User
) -> None:
    app = on_clock(make_app, clock)
    define_kept(app, admin, "note", action="anonymize")
    define_kept(app, admin, "score", "number", keep_for="5w")
    ok(set_value(app, admin, "c1", "note", "private"))
    ok(set_value(app, admin, "c1", "score", 9))
    clock.move(days=40)
    assert sweep(app) == 2
    items = ok(app.feed.read(admin, after=0, limit=100))["items"]
    expired = [i for i in items if i["type"] == "custom_field_value.expired"]
    told = [(i["data"]["fieldKey"], i["data"]["action"], i["data"]["value"]) for i in expired]
    assert sorted(told) == [("note", "anonymize", "[anonymized]"), ("score", "delete", None)]
    assert [i["sequence"] for i in items] == sorted(i["sequence"] for i in items)
    assert items[-2:] == expired
    defined = [i["data"] for i in items if i["type"] == "custom_field.defined"]
    assert [d.get("retention") for d in defined] == [
        {"keepFor": "30d", "action": "anonymize"},
        {"keepFor": "5w", "action": "delete"},
    ]
    for item in expired:
        assert set(item["data"]) == {"entityName", "entityId", "fieldKey", "action", "value"}


def test_a_webhook_receives_the_expiries_in_order(
    make_app: Callable[..., App], clock: MovingClock, admin: User
) -> None:
    app = on_clock(make_app, clock)
    receiver = Receiver()
    hook = create_webhook(app, admin, receiver.url, ["custom_field_value.expired"])
    define_kept(app, admin, "note", action="anonymize")
    for n in range(5):
        ok(set_value(app, admin, f"c{n}", "note", f"secret {n}"))
        clock.move(days=1)
    clock.move(days=30)
    with delivering(app):
        assert sweep(app) == 5
        got = receiver.wait_for(5)
        eventually(lambda: len(deliveries(app, admin, hook["webhookId"], "delivered")) == 5)
    receiver.stop()
    firsts: dict[str, dict[str, Any]] = {}
    for r in got:
        verify_signature(hook["secret"], r.headers["Tidings-Signature"], r.body)
        firsts.setdefault(r.item["id"], r.item)
    items = list(firsts.values())
    assert [i["type"] for i in items] == ["custom_field_value.expired"] * 5
    assert [i["data"]["entityId"] for i in items] == [f"c{n}" for n in range(5)]
    assert [i["sequence"] for i in items] == sorted(i["sequence"] for i in items)
    assert {i["data"]["value"] for i in items} == {"[anonymized]"}
