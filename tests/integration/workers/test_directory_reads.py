"""AccountDirectory's reads, on the stores it is given (read model and event store, both
backends): ``fetch`` lists the syncable accounts of the read model, ``lookup`` reads one
account from the event store, and what is not an active account is None. Between its
full reads, ``fetch`` reads only the accounts changed since (``changed_at``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from application import User
from application.app import App
from application.mail.read_model import MailReadModel
from tests.integration.mail.conftest import MakeMailApp
from tests.integration.mail.helpers import connect, connect_payload
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok
from workers.account_info import AccountInfo
from workers.directory import AccountDirectory


def test_fetch_and_lookup_read_the_read_model_and_the_event_store(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = make_mail_app().app
    directory = AccountDirectory(app.ctx.mail.read_model, app.ctx.store)
    account_id = connect(app, admin, dovecot, mailbox, scope="shared")
    expected = AccountInfo(account_id, admin.tenant_id, None, "shared", dovecot.host)

    assert directory.lookup(account_id) == expected  # the event store: at once
    app.projections.catch_up()
    assert directory.fetch()[account_id] == expected

    ok(app.write("disconnect-mail-account", {"accountId": account_id}, admin))
    assert directory.lookup(account_id) is None
    app.projections.catch_up()
    assert account_id not in directory.fetch()

    assert directory.lookup(str(uuid.uuid4())) is None  # no such stream
    assert directory.lookup("not-an-id") is None


class CountingReads:
    """The read model, counting which of its account reads a fetch made."""

    def __init__(self, read_model: MailReadModel) -> None:
        self._read_model = read_model
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self._read_model, name)


def only_changes(app: App, reads: CountingReads, directory: AccountDirectory) -> set[str]:
    """The directory's answer after a catch-up, asserting it read only the changes."""
    app.projections.catch_up()
    reads.calls.clear()
    fetched = set(directory.fetch())
    assert reads.calls == ["accounts_changed_after"]
    return fetched


def test_between_full_reads_fetch_reads_only_what_changed(
    make_mail_app: MakeMailApp,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    app = make_mail_app().app
    reads = CountingReads(app.ctx.mail.read_model)
    directory = AccountDirectory(reads, app.ctx.store, full_every=3600)
    boxes = [new_mailbox() for _ in range(4)]
    kept, moved, disconnected, deleted = (connect(app, admin, dovecot, box) for box in boxes)
    app.projections.catch_up()
    assert set(directory.fetch()) == {kept, moved, disconnected, deleted}
    assert "accounts" in reads.calls  # the first read reads every account

    assert only_changes(app, reads, directory) == {kept, moved, disconnected, deleted}

    added = connect(app, admin, dovecot, new_mailbox())
    imap = {**connect_payload(dovecot, boxes[1])["imap"], "host": "localhost"}
    update = {"accountId": moved, "imap": imap, "secret": boxes[1].password}
    ok(app.write("update-mail-account", update, admin))
    ok(app.write("disconnect-mail-account", {"accountId": disconnected}, admin))
    ok(app.write("delete-mail-account", {"accountId": deleted}, admin))
    assert only_changes(app, reads, directory) == {kept, moved, added}
    assert directory.fetch()[moved].host == "localhost"

    ok(app.write("reconnect-mail-account", {"accountId": disconnected}, admin))
    assert only_changes(app, reads, directory) == {kept, moved, added, disconnected}


def test_a_rebuilt_read_model_reads_the_same_and_keeps_its_changes(
    make_mail_app: MakeMailApp,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    app = make_mail_app().app
    reads = CountingReads(app.ctx.mail.read_model)
    directory = AccountDirectory(reads, app.ctx.store, full_every=3600)
    first, gone = (connect(app, admin, dovecot, new_mailbox()) for _ in range(2))
    app.projections.catch_up()
    before = directory.fetch()
    mark = app.ctx.mail.read_model.account_mark()
    assert mark > 0

    app.projections.rebuild()
    assert app.ctx.mail.read_model.account_mark() == mark  # each row from its own event
    assert AccountDirectory(app.ctx.mail.read_model, app.ctx.store).fetch() == before

    later = connect(app, admin, dovecot, new_mailbox())
    ok(app.write("disconnect-mail-account", {"accountId": gone}, admin))
    assert only_changes(app, reads, directory) == {first, later}


def test_a_full_read_comes_every_full_every_seconds(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = make_mail_app().app
    reads = CountingReads(app.ctx.mail.read_model)
    now = [0.0]
    directory = AccountDirectory(
        reads,
        app.ctx.store,
        full_every=60,
        clock=lambda: now[0],
    )
    account_id = connect(app, admin, dovecot, mailbox)
    app.projections.catch_up()
    directory.fetch()
    now[0] = 59.0
    assert only_changes(app, reads, directory) == {account_id}
    now[0] = 60.0
    reads.calls.clear()
    assert set(directory.fetch()) == {account_id}
    assert reads.calls == ["account_mark", "accounts"]


def test_rows_from_before_the_marker_are_read_in_full_and_change_later(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    first = make_mail_app()
    account_id = connect(first.app, admin, dovecot, mailbox)
    first.app.projections.catch_up()
    with first.app.ctx.mail.read_model.db.transaction() as cur:  # type: ignore[attr-defined]
        cur.execute("ALTER TABLE mail_accounts DROP COLUMN changed_at")
    first.app.close()

    app = make_mail_app().app  # bootstrap adds the column back, empty
    assert app.ctx.mail.read_model.account_mark() == 0
    reads = CountingReads(app.ctx.mail.read_model)
    directory = AccountDirectory(reads, app.ctx.store, full_every=3600)
    assert set(directory.fetch()) == {account_id}
    ok(app.write("disconnect-mail-account", {"accountId": account_id}, admin))
    assert only_changes(app, reads, directory) == set()
