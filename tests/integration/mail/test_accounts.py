"""Account lifecycle against the real Dovecot: connect (with verify), update,
disconnect, reconnect, delete, and who may see or manage which account."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from application import User
from application.signals import Signal
from infrastructure.devkit.processes import free_port
from infrastructure.in_process.signals import InProcessSignals
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import (
    accounts,
    connect,
    connect_payload,
)
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import failed, ok


def test_connect_with_verify_logs_in_first(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    account_id = connect(app, admin, dovecot, mailbox, verify=True)
    listed = accounts(app, admin)[account_id]
    assert listed["status"] == "active"
    assert listed["address"] == f"{mailbox.name}@mailbox.example"
    assert listed["imap"] == {
        "host": dovecot.host,
        "port": dovecot.port,
        "security": "none",
        "username": mailbox.name,
    }
    assert listed["health"]["messageCount"] == 0

    wrong = connect_payload(dovecot, mailbox, verify=True, secret="not-the-password")
    failed(app.write("connect-mail-account", wrong, admin), "mailbox_auth_failed", 422)

    closed = connect_payload(dovecot, mailbox, verify=True)
    closed["imap"] = {**closed["imap"], "port": free_port()}
    details = failed(app.write("connect-mail-account", closed, admin), "mailbox_unreachable", 422)
    assert details["errorKind"] == "transient"  # an ErrorKind, as in lastErrorKind

    # Failed verifications leave nothing behind.
    assert list(accounts(app, admin)) == [account_id]


def test_update_disconnect_reconnect_delete(
    mail: MailApp, admin: User, tenant: str, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    account_id = connect(app, admin, dovecot, mailbox)
    ref = {"accountId": account_id}

    ok(app.write("update-mail-account", {**ref, "displayName": "Renamed", "reason": "t"}, admin))
    ok(
        app.write(
            "update-mail-account",
            {**ref, "trustedAuthservId": "mx.trusted.example", "secret": "rotated-secret"},
            admin,
        )
    )
    listed = accounts(app, admin)[account_id]
    assert listed["displayName"] == "Renamed"
    assert listed["trustedAuthservId"] == "mx.trusted.example"
    assert app.ctx.mail.secrets.get(account_id) == "rotated-secret"
    failed(app.write("update-mail-account", ref, admin), "invalid_payload", 400)

    assert ok(app.write("disconnect-mail-account", ref, admin))["alreadyDisconnected"] is False
    assert ok(app.write("disconnect-mail-account", ref, admin))["alreadyDisconnected"] is True
    assert accounts(app, admin)[account_id]["status"] == "disconnected"
    failed(
        app.write("update-mail-account", {**ref, "displayName": "x"}, admin),
        "account_disconnected",
        422,
    )

    assert ok(app.write("reconnect-mail-account", ref, admin))["alreadyActive"] is False
    assert ok(app.write("reconnect-mail-account", ref, admin))["alreadyActive"] is True
    assert accounts(app, admin)[account_id]["status"] == "active"

    ok(app.write("delete-mail-account", ref, admin))
    assert account_id not in accounts(app, admin)
    for handler in (
        "delete-mail-account",
        "disconnect-mail-account",
        "reconnect-mail-account",
        "sync-account-now",
    ):
        failed(app.write(handler, ref, admin), "not_found", 404)
    failed(app.write("update-mail-account", {**ref, "displayName": "x"}, admin), "not_found", 404)

    # Unknown ids and ids that are no UUID answer 404 too.
    for unknown in (str(uuid.uuid4()), "not-a-uuid"):
        for handler in ("disconnect-mail-account", "reconnect-mail-account"):
            failed(app.write(handler, {"accountId": unknown}, admin), "not_found", 404)
        failed(
            app.write("update-mail-account", {"accountId": unknown, "displayName": "x"}, admin),
            "not_found",
            404,
        )


def test_other_tenants_accounts_answer_404(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    account_id = connect(app, admin, dovecot, mailbox)
    other = User(
        id="admin-x", tenant_id="t-" + uuid.uuid4().hex[:8], roles=frozenset({"TenantAdmin"})
    )
    ref = {"accountId": account_id}
    for handler in (
        "disconnect-mail-account",
        "reconnect-mail-account",
        "delete-mail-account",
        "sync-account-now",
    ):
        failed(app.write(handler, ref, other), "not_found", 404)
    failed(app.write("update-mail-account", {**ref, "displayName": "x"}, other), "not_found", 404)
    failed(app.query("list-messages", ref, other), "not_found", 404)
    assert accounts(app, other) == {}
    assert accounts(app, admin)[account_id]["status"] == "active"


def test_members_see_shared_accounts_but_cannot_manage_them(
    mail: MailApp,
    admin: User,
    member: User,
    tenant: str,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    app = mail.app
    shared = connect(app, admin, dovecot, new_mailbox())
    ref = {"accountId": shared}
    assert shared in accounts(app, member)
    for handler in (
        "disconnect-mail-account",
        "reconnect-mail-account",
        "delete-mail-account",
        "sync-account-now",
    ):
        failed(app.write(handler, ref, member), "forbidden", 403)
    failed(app.write("update-mail-account", {**ref, "displayName": "x"}, member), "forbidden", 403)
    # A member cannot connect a shared account either.
    failed(
        app.write("connect-mail-account", connect_payload(dovecot, new_mailbox()), member),
        "forbidden",
        403,
    )

    # A user-scoped account: its owner and TenantAdmins see and manage it; no one else.
    own = connect(app, member, dovecot, new_mailbox(), scope="user")
    peer = User(id="peer-" + tenant, tenant_id=tenant, roles=frozenset({"TenantMember"}))
    assert accounts(app, member)[own]["ownerUserId"] == member.id
    assert own in accounts(app, admin)
    assert own not in accounts(app, peer) and shared in accounts(app, peer)
    failed(app.write("disconnect-mail-account", {"accountId": own}, peer), "not_found", 404)
    failed(app.query("list-messages", {"accountId": own}, peer), "not_found", 404)
    operator = User(id="operator", tenant_id="system", roles=frozenset({"SystemAdmin"}))
    private = ok(
        app.write(
            "ingest-message",
            {
                "accountId": own,
                "providerMessageId": "emailid:private-1",
                "subject": "private",
                "receivedAt": "2024-05-01T10:00:00Z",
                "sizeBytes": 10,
            },
            operator,
        )
    )["messageId"]
    app.projections.catch_up()
    failed(app.query("get-message", {"messageId": private}, peer), "not_found", 404)
    assert ok(app.query("list-messages", {}, peer))["items"] == []
    assert ok(app.query("list-threads", {}, peer))["items"] == []
    assert ok(app.query("get-message", {"messageId": private}, member))["subject"] == "private"
    assert ok(app.query("get-message", {"messageId": private}, admin))["subject"] == "private"
    ok(app.write("update-mail-account", {"accountId": own, "displayName": "Mine"}, member))
    ok(app.write("disconnect-mail-account", {"accountId": own}, admin))
    ok(app.write("reconnect-mail-account", {"accountId": own}, member))
    ok(app.write("delete-mail-account", {"accountId": own}, member))
    assert own not in accounts(app, admin)


def test_account_signals_name_the_canonical_account_id(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    heard: list[Signal] = []
    bus = app.ctx.mail.signals
    assert isinstance(bus, InProcessSignals)
    bus.subscribe(heard.append)
    account_id = connect(app, admin, dovecot, mailbox)
    spelled = account_id.upper()  # any spelling UUID() accepts reaches the account
    assert (
        ok(app.write("sync-account-now", {"accountId": spelled}, admin))["accountId"] == account_id
    )
    ok(app.write("disconnect-mail-account", {"accountId": spelled}, admin))
    failed(
        app.write("sync-account-now", {"accountId": account_id}, admin), "account_not_active", 422
    )
    ok(app.write("delete-mail-account", {"accountId": spelled}, admin))
    assert [(s.kind, s.account_id) for s in heard] == [
        ("account_changed", account_id),
        ("sync_now", account_id),
        ("account_changed", account_id),
        ("account_changed", account_id),
    ]
