"""A folder is gone only when the server says so, on SQLite and PostgreSQL: a scripted
server whose LIST leaves Sent out (STATUS says it is there: nothing deleted, nothing
moved; STATUS refused: the poll fails and decides nothing; STATUS says NO: gone), and a
folder really deleted on Dovecot (messages only there deleted, copies elsewhere moved),
and messages deleted with their folder restored when it comes back (a rebuild agrees)."""

from __future__ import annotations

from typing import Any

from application import User
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import connect, count_events, messages, raw_mail
from tests.integration.mail.test_folder_sync import append, imap
from tests.integration.mail.test_hostile_servers import connect_hostile
from tests.integration.mail.test_moves import feed
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.hostile_imap import HostileImapServer, HostileMessage, Script

DELETED = "tidings.mail.MessageDeleted"
MOVED = "tidings.mail.MessageFoldersChanged"
RESTORED = "tidings.mail.MessageRestored"
INBOX_LINE, SENT_LINE = b'() "/" INBOX', b'(\\Sent) "/" Sent'


def folders_by_uid(mail: MailApp, admin: User, account_id: str) -> dict[str, tuple[str, ...]]:
    items = messages(mail.app, admin, accountId=account_id)
    return {m["subject"]: (m["state"], *m["folders"]) for m in items}


def statuses(server: HostileImapServer, since: int) -> int:
    return sum(b" STATUS " in c.upper() for c in server.commands[since:])


def test_a_listing_that_leaves_sent_out_deletes_nothing(
    make_mail_app: MakeMailApp, admin: User
) -> None:
    mail = make_mail_app(folder_list_interval=0)  # listed at every poll
    script = Script(
        [HostileMessage(1), HostileMessage(2)],
        list_lines=[INBOX_LINE, SENT_LINE],
        folder_messages={b"Sent": [HostileMessage(10), HostileMessage(11)]},
    )
    with HostileImapServer(script, lifetime=120) as hostile:
        account_id = connect_hostile(mail.app, admin, hostile, "unlisted")
        assert mail.outcome(account_id, mail.poll()).error_kind is None
        first = folders_by_uid(mail, admin, account_id)
        assert sorted(first.values()) == [("ok", "INBOX")] * 2 + [("ok", "Sent")] * 2

        # LIST leaves Sent out, STATUS Sent answers OK: the listing lied
        script.list_lines, script.status_answer = [INBOX_LINE], b"OK done"
        before = len(hostile.commands)
        assert mail.outcome(account_id, mail.poll()).error_kind is None
        assert statuses(hostile, before) == 1
        assert folders_by_uid(mail, admin, account_id) == first
        script.list_lines = [INBOX_LINE, SENT_LINE]  # and lists it again
        assert mail.outcome(account_id, mail.poll()).error_kind is None
        assert folders_by_uid(mail, admin, account_id) == first

        # STATUS answered BAD, or NO with a code that says nothing of existence: the
        # poll fails, nothing is decided
        script.list_lines = [INBOX_LINE]
        for refused in (b"BAD what", b"NO [SERVERBUG] try later"):
            script.status_answer = refused
            assert mail.outcome(account_id, mail.poll()).error_kind is not None
            assert folders_by_uid(mail, admin, account_id) == first
        assert count_events(mail.app, DELETED) == 0 and count_events(mail.app, MOVED) == 0

        # the server says Sent does not exist: gone, its messages found nowhere else too
        script.status_answer = b"NO [NONEXISTENT] no such folder"
        assert mail.outcome(account_id, mail.poll()).error_kind is None
    after = folders_by_uid(mail, admin, account_id)
    # (a deleted message's row keeps the folders it was last in)
    assert sorted(after.values()) == [("deleted", "Sent")] * 2 + [("ok", "INBOX")] * 2
    assert count_events(mail.app, DELETED) == 2


def test_messages_deleted_with_their_folder_come_back_with_it(
    make_mail_app: MakeMailApp, admin: User
) -> None:
    mail = make_mail_app(folder_list_interval=0)
    script = Script(
        [HostileMessage(1)],
        list_lines=[INBOX_LINE, SENT_LINE],
        folder_messages={b"Sent": [HostileMessage(10), HostileMessage(11)]},
    )
    with HostileImapServer(script, lifetime=120) as hostile:
        account_id = connect_hostile(mail.app, admin, hostile, "back")
        assert mail.outcome(account_id, mail.poll()).error_kind is None
        first = folders_by_uid(mail, admin, account_id)
        script.list_lines = [INBOX_LINE]  # STATUS says NO: Sent is gone
        assert mail.outcome(account_id, mail.poll()).error_kind is None
        assert count_events(mail.app, DELETED) == 2
        script.list_lines = [INBOX_LINE, SENT_LINE]  # and back, with the same messages
        assert mail.outcome(account_id, mail.poll()).error_kind is None
        assert folders_by_uid(mail, admin, account_id) == first
        assert count_events(mail.app, RESTORED) == 2
        assert mail.outcome(account_id, mail.poll()).error_kind is None
        assert count_events(mail.app, RESTORED) == 2 and count_events(mail.app, DELETED) == 2


def test_a_folder_deleted_on_dovecot_deletes_its_messages_found_nowhere_else(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    mail = make_mail_app(folder_list_interval=0)
    only_there = raw_mail(1, subject="only there")
    append(dovecot, mailbox, "Old", only_there)
    append(dovecot, mailbox, "Old", raw_mail(2, subject="copied"))
    with imap(dovecot, mailbox) as client:
        client.select_folder("Old")
        client.copy(client.search(["SUBJECT", "copied"]), "INBOX")
    account_id = connect(mail.app, admin, dovecot, mailbox, folders="all")
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    assert folders_by_uid(mail, admin, account_id)["copied"] == ("ok", "INBOX", "Old")
    with imap(dovecot, mailbox) as client:
        client.delete_folder("Old")
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    listed = folders_by_uid(mail, admin, account_id)
    assert listed == {"only there": ("deleted", "Old"), "copied": ("ok", "INBOX")}
    assert count_events(mail.app, DELETED) == 1  # and "copied" moved: found in Old, then not
    assert count_events(mail.app, MOVED) == 2

    # The folder made again with the same message: it comes back (one restored, its
    # state and folders as before), the feed says so, and a rebuild agrees.
    append(dovecot, mailbox, "Old", only_there)
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    listed = folders_by_uid(mail, admin, account_id)
    assert listed == {"only there": ("ok", "Old"), "copied": ("ok", "INBOX")}
    assert count_events(mail.app, RESTORED) == 1

    def answers() -> Any:
        return (
            messages(mail.app, admin, accountId=account_id),
            messages(mail.app, admin, accountId=account_id, folder="Old"),
            feed(mail, admin, account_id),
        )

    expected = answers()
    assert expected[2][-1] == (
        "message.restored",
        {
            "messageId": expected[1][0]["messageId"],
            "accountId": account_id,
            "folders": ["Old"],
            "state": "ok",
        },
    )
    mail.app.projections.rebuild()
    assert answers() == expected
