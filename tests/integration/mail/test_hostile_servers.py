"""One poll over accounts on hostile IMAP servers (``tests.support.hostile_imap``) and one
healthy Dovecot account, on SQLite and PostgreSQL: each hostile server's fault stays
with its own account, recorded as such, and every healthy message is ingested."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from application import User
from application.app import App
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import accounts, connect, messages, raw_mail
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.hostile_imap import HostileImapServer, HostileMessage, Script
from tests.support.results import ok
from workers.once import poll_once

MiB = 1024 * 1024
DEADLINE = 4.0


def connect_hostile(app: App, user: User, server: HostileImapServer, name: str) -> str:
    payload: dict[str, Any] = {
        "provider": "imap",
        "displayName": f"Hostile {name}",
        "address": f"{name}@hostile.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": server.host, "port": server.port, "security": "none", "username": name},
        "secret": "pw",
    }
    account_id: str = ok(app.write("connect-mail-account", payload, user))["accountId"]
    return account_id


def test_each_hostile_server_fails_or_skips_alone_and_the_healthy_mail_is_ingested(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    dovecot.deliver(mailbox, [raw_mail(0), raw_mail(1)])
    healthy = connect(app, admin, dovecot, mailbox)
    liar = HostileMessage(1, body_literal=64 * MiB)  # says small, announces 64 MiB
    scripts = {
        "huge_size": Script([HostileMessage(1, size=str(2**63)), HostileMessage(2)]),
        "bad_date": Script(
            [HostileMessage(1, internaldate='"01-Jan-9999 00:00:00 -2359"'), HostileMessage(2)]
        ),
        "big_literal": Script([liar, HostileMessage(2)]),
        "bad_uidvalidity": Script([HostileMessage(1)], uidvalidity=str(2**63 + 1)),
        "drip": Script([HostileMessage(1)], drip_from="login"),
    }
    with contextlib.ExitStack() as stack:
        servers = {
            name: stack.enter_context(HostileImapServer(script, lifetime=60))
            for name, script in scripts.items()
        }
        ids = {name: connect_hostile(app, admin, s, name) for name, s in servers.items()}
        started = time.monotonic()
        outcomes = poll_once(app, mail.syncer, concurrency=8, deadline_seconds=DEADLINE)
        took = time.monotonic() - started
        by_account = {o.account_id: o for o in outcomes}
        assert took < DEADLINE + 5.0  # the drip is cut at the poll's deadline

        listed = accounts(app, admin)
        kinds = {name: listed[ids[name]]["health"]["lastErrorKind"] for name in ids}
        assert kinds == {
            "huge_size": None,
            "bad_date": None,
            "big_literal": None,
            "bad_uidvalidity": "transient",
            "drip": "timeout",
        }
        assert by_account[healthy].ingested == 2 and by_account[healthy].error_kind is None
        assert listed[healthy]["health"]["lastErrorKind"] is None

        # A hostile value skips its message; the next one is ingested.
        for name in ("huge_size", "bad_date"):
            assert by_account[ids[name]].ingested == 1
            [only] = messages(app, admin, accountId=ids[name])
            assert only["sizeBytes"] == len(scripts[name].messages[1].body)
        # A literal over the cap: recorded too_large with its metadata, the next ingested.
        found = messages(app, admin, accountId=ids["big_literal"])
        assert sorted((m["state"], m["sizeBytes"]) for m in found) == [
            ("ok", len(scripts["big_literal"].messages[1].body)),
            ("too_large", len(liar.body)),
        ]

        # The cursors moved past the skipped messages: the next poll brings nothing again.
        again = poll_once(app, mail.syncer, concurrency=8, deadline_seconds=DEADLINE)
        for outcome in again:
            if outcome.account_id in (ids["huge_size"], ids["bad_date"], ids["big_literal"]):
                assert (outcome.ingested, outcome.error_kind) == (0, None)
    assert len(messages(app, admin, accountId=healthy)) == 2
