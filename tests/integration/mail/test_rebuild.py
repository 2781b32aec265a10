"""A rebuild of the read models from position 0 answers every mail query the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from application import User
from application.app import App
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import (
    OLD,
    RECENT,
    connect,
    raw_mail,
)
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok


def snapshot(app: App, users: list[User]) -> dict[str, Any]:
    """Every mail query answer these users get (health timestamps left out)."""
    app.projections.catch_up()
    out: dict[str, Any] = {}
    for user in users:
        listed = ok(app.query("list-mail-accounts", {}, user))["items"]
        for item in listed:
            item["health"].pop("lastSyncAt")
        out[f"{user.id}/accounts"] = listed
        pages, cursor = [], None
        while True:
            page = ok(app.query("list-messages", {"limit": 4, "cursor": cursor}, user))
            pages.append(page)
            if (cursor := page["nextCursor"]) is None:
                break
        out[f"{user.id}/messages"] = pages
        out[f"{user.id}/threads"] = ok(app.query("list-threads", {"limit": 100}, user))
        for page in pages:
            for item in page["items"]:
                out[f"{user.id}/message/{item['messageId']}"] = ok(
                    app.query("get-message", {"messageId": item["messageId"]}, user)
                )
        for state in ("ok", "malformed", "too_large", "rejected"):
            out[f"{user.id}/state/{state}"] = ok(
                app.query("list-messages", {"state": state, "limit": 100}, user)
            )
    return out


def test_rebuild_answers_every_mail_query_the_same(
    mail: MailApp,
    admin: User,
    member: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    app = mail.app
    boxes = [new_mailbox() for _ in range(4)]
    root = "<rebuild.root@test.example>"
    dovecot.deliver(
        boxes[0],
        [
            raw_mail(1, subject="root", message_id=root),
            raw_mail(2, subject="Re: root", extra_headers=f"References: {root}\r\n"),
            b"Subject: broken\r\n\r\nno sender\r\n",
            raw_mail(
                3,
                subject="spoofed",
                extra_headers="Authentication-Results: mx.trusted; dmarc=fail\r\n",
            ),
        ],
        internal_date=RECENT,
    )
    dovecot.deliver(boxes[0], [raw_mail(4, subject="ancient")], internal_date=OLD)
    dovecot.deliver(boxes[1], [raw_mail(10 + i) for i in range(3)])
    dovecot.deliver(boxes[2], [raw_mail(20 + i) for i in range(2)])
    dovecot.deliver(boxes[3], [raw_mail(30)])
    shared = connect(app, admin, dovecot, boxes[0], trustedAuthservId="mx.trusted")
    personal = connect(app, member, dovecot, boxes[1], scope="user")
    doomed = connect(app, admin, dovecot, boxes[2])
    locked = connect(app, admin, dovecot, boxes[3], secret="wrong")
    ok(app.write("update-mail-account", {"accountId": shared, "displayName": "Shared box"}, admin))
    mail.poll()
    ok(app.write("delete-mail-account", {"accountId": doomed}, admin))
    ok(app.write("disconnect-mail-account", {"accountId": personal}, member))
    app.projections.catch_up()

    users = [admin, member]
    before = snapshot(app, users)
    assert len(before[f"{admin.id}/accounts"]) == 3
    assert before[f"{admin.id}/state/rejected"]["items"]
    assert before[f"{admin.id}/state/malformed"]["items"]
    statuses = {a["accountId"]: a["status"] for a in before[f"{admin.id}/accounts"]}
    assert statuses == {shared: "active", personal: "disconnected", locked: "auth_error"}

    app.projections.rebuild()
    assert snapshot(app, users) == before
