"""The watch path's ingestion (``WatchIngest`` over ``AccountSync``), both backends, a real
Dovecot: a page is answered by a future once the group commit stored it, the account is
loaded once per watch and again only after ``changed``, and a watch whose account is no
longer active stores nothing."""

from __future__ import annotations

from concurrent.futures import Future

from application import User
from application.mail.sync_outcome import SyncOutcome
from infrastructure.imap import ImapMailboxSession
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import connect, messages, raw_mail
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok
from workers.metrics import WorkerMetrics
from workers.news import News
from workers.watch_ingest import WatchIngest, watch_committer


def watch_ingest(mail: MailApp) -> WatchIngest:
    told: list[News] = []
    committer = watch_committer(mail.syncer)
    folders = mail.app.ctx.mail.folders
    return WatchIngest(mail.syncer, committer, WorkerMetrics(), told.append, folders=folders)


def outcome(answer: Future[SyncOutcome]) -> SyncOutcome:
    return answer.result(timeout=60)


def test_pages_are_answered_once_stored_and_a_deactivated_account_stores_nothing(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    account_id = connect(app, admin, dovecot, mailbox)
    dovecot.deliver(mailbox, [raw_mail(1, subject="first")])
    ingest = watch_ingest(mail)
    opened = ingest.open_session(account_id)  # loads the account: the watch's one load
    account = mail.syncer.syncable(account_id)
    assert account is not None

    def page() -> SyncOutcome:
        # A fresh session each time: here no IDLE tells the session of new mail.
        with mail.syncer.open_session(account) as session:
            return outcome(ingest.sync(account_id, session))

    try:
        first = outcome(ingest.sync(account_id, opened))
        assert (first.ingested, first.error_kind, first.cursor is not None) == (1, None, True)
        assert page().ingested == 0  # after the cursor it kept

        ok(app.write("disconnect-mail-account", {"accountId": account_id}, admin))
        dovecot.deliver(mailbox, [raw_mail(2, subject="after the disconnect")])
        # Not told yet: the watch goes on with the account it loaded when it opened.
        assert page().ingested == 1
        dovecot.deliver(mailbox, [raw_mail(3, subject="after the news")])
        ingest.changed(account_id)  # the supervisor heard of the change
        skipped = page()
        assert (skipped.skipped, skipped.ingested, skipped.error_kind) == (True, 0, None)
    finally:
        opened.close()
        ingest.close()
    subjects = {m["subject"] for m in messages(app, admin, accountId=account_id)}
    assert subjects == {"first", "after the disconnect"}


def test_a_watch_has_the_synced_folders_pushed_once_they_were_listed(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    account_id = connect(mail.app, admin, dovecot, mailbox)
    ingest = watch_ingest(mail)
    session = ingest.open_session(account_id)
    assert isinstance(session, ImapMailboxSession)
    try:
        ingest.watch_folders(account_id, session)  # never listed: nothing to ask for
        assert session.pushed_folders == frozenset()
        [polled] = mail.poll()  # lists the folders
        assert polled.listed and polled.error_kind is None
        ingest.watch_folders(account_id, session)
        assert session.pushed_folders == {"Sent", "Archive", "Drafts", "Junk", "Trash"}
        [again] = mail.poll()  # not due for a listing: nothing for the watch to ask
        assert not again.listed
    finally:
        session.close()
        ingest.close()
