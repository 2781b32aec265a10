"""Flags mirrored by the poll (``FlagMirror`` after the arrivals), on SQLite and
PostgreSQL, against the real Dovecot with CONDSTORE and started without CONDSTORE and
QRESYNC (the window): read and flagged in another client, keywords, nothing changed,
racing pollers, a rebuild, the feed; and hostile servers (``tests.support.hostile_imap``):
thousands of keywords, kilobyte keywords, every message answered every time."""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pytest
from imapclient import IMAPClient

from application import User
from application.app import App
from application.errors import StoreUnavailable
from application.mail.flag_mirror import FlagMirror
from application.mail.flag_state import INBOX, FlagCursor, FlagStateStore, FlagWindow, UidEntry
from projections.mail_reader import MailReader
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import connect, count_events, messages, raw_mail
from tests.integration.mail.test_hostile_servers import connect_hostile
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.hostile_imap import HostileImapServer, HostileMessage, Script
from tests.support.results import ok

FLAGS_CHANGED = "tidings.mail.MessageFlagsChanged"
SEEN, FLAGGED = "\\Seen", "\\Flagged"


@pytest.fixture(scope="module")
def plain_dovecot() -> Iterator[DovecotServer]:
    """A Dovecot that offers neither CONDSTORE nor QRESYNC: flags by the window."""
    with DovecotServer(hide_capabilities=("CONDSTORE", "QRESYNC")) as server:
        yield server


@pytest.fixture(params=["condstore", "window"])
def server(request: pytest.FixtureRequest, dovecot: DovecotServer) -> DovecotServer:
    if request.param == "condstore":
        return dovecot
    plain: DovecotServer = request.getfixturevalue("plain_dovecot")
    return plain


@pytest.fixture
def box(server: DovecotServer) -> DovecotUser:
    return server.add_user("f" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))


class OtherClient:
    """Another mail client of the same mailbox: it reads, flags and tags."""

    def __init__(self, server: DovecotServer, box: DovecotUser) -> None:
        self.client = IMAPClient(server.host, server.port, ssl=False, timeout=30)
        self.client.login(box.name, box.password)
        self.client.select_folder("INBOX")

    def uid(self, subject: str) -> int:
        [uid] = self.client.search(["SUBJECT", subject])
        return int(uid)

    def add(self, subject: str, *flags: str) -> None:
        self.client.add_flags([self.uid(subject)], [f.encode() for f in flags])

    def remove(self, subject: str, *flags: str) -> None:
        self.client.remove_flags([self.uid(subject)], [f.encode() for f in flags])

    def close(self) -> None:
        self.client.logout()


def by_subject(app: App, admin: User, account_id: str, **filters: Any) -> dict[str, Any]:
    return {m["subject"]: m for m in messages(app, admin, accountId=account_id, **filters)}


def seeded(mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser) -> str:
    """Three unread messages and one read on arrival, ingested by a first poll."""
    server.deliver(box, [raw_mail(i, subject=f"m{i}") for i in range(3)])
    server.deliver(box, [raw_mail(3, subject="m3")], seen=True)
    account_id = connect(mail.app, admin, server, box)
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (4, None)
    return account_id


def test_flags_changed_elsewhere_are_mirrored_once_each(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    app = mail.app
    account_id = seeded(mail, admin, server, box)
    listed = by_subject(app, admin, account_id)
    assert (listed["m3"]["flags"], listed["m3"]["unread"]) == ([SEEN], False)
    for i in range(3):  # \Recent, if the server said it, is not kept
        assert (listed[f"m{i}"]["flags"], listed[f"m{i}"]["unread"]) == ([], True)
        assert listed[f"m{i}"]["flagged"] is False
    assert count_events(app, FLAGS_CHANGED) == 0

    other = OtherClient(server, box)
    try:
        other.add("m0", SEEN)
        other.add("m1", FLAGGED, "$Work")
        mail.poll()
        listed = by_subject(app, admin, account_id)
        assert (listed["m0"]["flags"], listed["m0"]["unread"]) == ([SEEN], False)
        assert listed["m1"]["flags"] == ["$Work", FLAGGED]
        assert (listed["m1"]["unread"], listed["m1"]["flagged"]) == (True, True)
        assert count_events(app, FLAGS_CHANGED) == 2
        assert set(by_subject(app, admin, account_id, unread=True)) == {"m1", "m2"}
        assert set(by_subject(app, admin, account_id, flagged=True)) == {"m1"}
        assert set(by_subject(app, admin, account_id, unread=False, flagged=False)) == {
            "m0",
            "m3",
        }
        got = ok(app.query("get-message", {"messageId": listed["m1"]["messageId"]}, admin))
        assert (got["flags"], got["unread"], got["flagged"]) == (["$Work", FLAGGED], True, True)

        other.remove("m1", FLAGGED)
        mail.poll()
        listed = by_subject(app, admin, account_id)
        assert (listed["m1"]["flags"], listed["m1"]["flagged"]) == (["$Work"], False)
        assert count_events(app, FLAGS_CHANGED) == 3
    finally:
        other.close()

    mail.poll()  # nothing changed: no event
    assert count_events(app, FLAGS_CHANGED) == 3

    feed = ok(app.feed.read(admin, after=0, limit=100))["items"]
    changes = [i["data"] for i in feed if i["type"] == "message.flags_changed"]
    # The first two came in one poll (in either order), the third in the next.
    assert sorted((c["flags"], c["unread"], c["flagged"]) for c in changes[:2]) == [
        (["$Work", FLAGGED], True, True),
        ([SEEN], False, False),
    ]
    assert {c["messageId"] for c in changes} == {
        listed["m0"]["messageId"],
        listed["m1"]["messageId"],
    }
    assert changes[-1] == {
        "messageId": listed["m1"]["messageId"],
        "accountId": account_id,
        "flags": ["$Work"],
        "unread": True,
        "flagged": False,
    }


def test_an_unchanged_inbox_with_condstore_costs_no_fetch(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    account_id = seeded(mail, admin, dovecot, mailbox)
    mirror, account = mail.syncer.flags, mail.syncer.syncable(account_id)
    assert mirror is not None and account is not None
    with mail.syncer.open_session(account) as session:
        got = mirror.mirror(session, account)
    assert (got.mode, got.fetched, got.changed) == ("unchanged", 0, 0)


def test_the_window_reads_flags_without_condstore(
    mail: MailApp, admin: User, plain_dovecot: DovecotServer
) -> None:
    box = plain_dovecot.add_user("w" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))
    account_id = seeded(mail, admin, plain_dovecot, box)
    mirror, account = mail.syncer.flags, mail.syncer.syncable(account_id)
    assert mirror is not None and account is not None
    with mail.syncer.open_session(account) as session:
        assert "CONDSTORE" not in session.capabilities
        got = mirror.mirror(session, account)
    assert (got.mode, got.fetched, got.changed) == ("window", 4, 0)


def test_racing_pollers_append_one_event_per_change(
    make_mail_app: MakeMailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    first, second = make_mail_app(), make_mail_app()
    account_id = seeded(first, admin, server, box)
    other = OtherClient(server, box)
    try:
        other.add("m0", SEEN)
        other.add("m2", FLAGGED, "Later")
    finally:
        other.close()
    barrier = threading.Barrier(2)

    def poll(app: MailApp) -> None:
        barrier.wait()
        app.poll()

    threads = [threading.Thread(target=poll, args=(a,)) for a in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert count_events(first.app, FLAGS_CHANGED) == 2
    first.poll()
    second.poll()  # restarts read from the saved cursor: still nothing new
    assert count_events(first.app, FLAGS_CHANGED) == 2
    listed = by_subject(first.app, admin, account_id)
    assert listed["m0"]["unread"] is False
    assert listed["m2"]["flags"] == ["Later", FLAGGED]


def test_a_rebuild_gives_the_same_rows(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    app = mail.app
    account_id = seeded(mail, admin, server, box)
    other = OtherClient(server, box)
    try:
        other.add("m1", SEEN, FLAGGED)
        other.remove("m3", SEEN)
    finally:
        other.close()
    mail.poll()
    before = by_subject(app, admin, account_id)
    assert (before["m3"]["unread"], before["m1"]["flagged"]) == (True, True)
    app.projections.rebuild()
    assert by_subject(app, admin, account_id) == before


def test_hostile_keywords_are_bounded_and_a_server_answering_everything_costs_no_events(
    mail: MailApp, admin: User
) -> None:
    app = mail.app
    thousands = b" ".join(b"k%04d" % i for i in range(3000))
    script = Script(
        [
            HostileMessage(1, flags=b"\\Seen " + thousands),
            HostileMessage(2, flags=b"x" * 1024 + b" \\Flagged y" + b"z" * 100),
        ],
        capabilities="IMAP4rev1 IDLE CONDSTORE ENABLE",
        highestmodseq=10,
    )
    with HostileImapServer(script, lifetime=120) as hostile:
        account_id = connect_hostile(app, admin, hostile, "keywords")
        assert mail.outcome(account_id, mail.poll()).ingested == 2
        before = len(hostile.commands)
        assert mail.outcome(account_id, mail.poll()).error_kind is None  # nothing changed
        unchanged = [c.upper() for c in hostile.commands[before:]]
        assert sum(b" EXAMINE " in c for c in unchanged) == 1  # the arrivals' alone
        assert not [c for c in unchanged if b"FETCH" in c]  # no FETCH at all
        for modseq in (11, 12, 13):  # it claims changes, then answers every message
            script.highestmodseq = modseq
            assert mail.outcome(account_id, mail.poll()).error_kind is None
    assert count_events(app, FLAGS_CHANGED) == 0
    rows = sorted(messages(app, admin, accountId=account_id), key=lambda m: m["sizeBytes"])
    flags = {len(m["flags"]): m for m in rows}
    assert set(flags) == {51, 1}  # 50 keywords and \Seen; \Flagged alone
    assert flags[51]["unread"] is False and SEEN in flags[51]["flags"]
    assert flags[1]["flags"] == [FLAGGED]
    store = app.ctx.mail.flags
    assert store is not None
    cursor = store.cursor(account_id, INBOX)
    assert cursor is not None and cursor.unreliable  # the window from now on


def test_a_uidvalidity_reset_compares_the_streams_again(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    """Messages brought again by a reset are duplicates: their flags are compared with
    their streams, not taken as stored (a change made meanwhile is still mirrored)."""
    app = mail.app
    account_id = seeded(mail, admin, server, box)
    other = OtherClient(server, box)
    try:
        other.add("m2", SEEN)
    finally:
        other.close()
    before = app.ctx.mail.state.cursor(account_id)
    assert before is not None
    server.set_uidvalidity(box, before.uidvalidity + 777)
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.duplicates, outcome.error_kind) == (0, 4, None)
    listed = by_subject(app, admin, account_id)
    assert listed["m2"]["unread"] is False
    assert count_events(app, FLAGS_CHANGED) == 1
    mail.poll()
    assert count_events(app, FLAGS_CHANGED) == 1


def flag_indexes(reader: MailReader) -> set[str]:
    """The names of the per-account flag indexes of ``mail_messages``."""
    with reader.db.reading() as cur:
        if reader.db.dialect == "postgresql":
            cur.execute(
                "SELECT indexname FROM pg_indexes"
                " WHERE schemaname = current_schema() AND tablename = 'mail_messages'"
            )
        else:
            cur.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'mail_messages'")
        names = {str(row[0]) for row in cur.fetchall()}
    return {
        n for n in names if n.startswith(("ix_mail_messages_unread_", "ix_mail_messages_flagged_"))
    }


def test_tables_made_before_the_flag_columns_gain_them(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    first = make_mail_app()
    account_id = seeded(first, admin, dovecot, mailbox)
    first.app.projections.catch_up()
    reader = first.app.ctx.mail.read_model
    assert isinstance(reader, MailReader)
    indexes = flag_indexes(reader)
    assert len(indexes) == 2
    with reader.db.transaction() as cur:
        for index in indexes:
            cur.execute(f"DROP INDEX {index}")
        for column in ("flags", "unread", "flagged"):
            cur.execute(f"ALTER TABLE mail_messages DROP COLUMN {column}")
    first.app.close()

    second = make_mail_app()  # bootstrap adds them back, with their indexes
    listed = by_subject(second.app, admin, account_id)
    assert all(
        (m["flags"], m["unread"], m["flagged"]) == ([], True, False) for m in listed.values()
    )
    dovecot.deliver(mailbox, [raw_mail(9, subject="after")], seen=True)
    second.poll()
    listed = by_subject(second.app, admin, account_id, unread=False)
    assert set(listed) == {"after"}  # rows from before keep the defaults until a change
    reader = second.app.ctx.mail.read_model
    assert isinstance(reader, MailReader)
    assert len(flag_indexes(reader)) == 2
    make_mail_app().app.close()  # a later start adds nothing
    assert len(flag_indexes(reader)) == 2


def test_one_flag_pass_at_a_time_per_folder(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    """A pass that finds the folder claimed by another (live) pass skips its flag step;
    a claim past its expiry (a crashed holder's) is taken over."""
    app = mail.app
    account_id = seeded(mail, admin, dovecot, mailbox)
    other = OtherClient(dovecot, mailbox)
    try:
        other.add("m0", SEEN)
    finally:
        other.close()
    store, mirror = app.ctx.mail.flags, mail.syncer.flags
    account = mail.syncer.syncable(account_id)
    assert store is not None and mirror is not None and account is not None
    now = app.ctx.clock.now().timestamp()
    assert store.claim(account_id, INBOX, "racer", now=now, until=now + 60)
    with mail.syncer.open_session(account) as session:
        assert mirror.mirror(session, account).mode == "busy"
    assert count_events(app, FLAGS_CHANGED) == 0
    store.release(account_id, INBOX, "someone else")  # not theirs to end
    assert not store.claim(account_id, INBOX, "third", now=now, until=now + 60)

    assert store.claim(account_id, INBOX, "third", now=now + 61, until=now + 120)  # lapsed
    store.release(account_id, INBOX, "third")
    with mail.syncer.open_session(account) as session:
        assert mirror.mirror(session, account).changed == 1
    assert count_events(app, FLAGS_CHANGED) == 1
    assert store.claim(account_id, INBOX, "after", now=now, until=now + 60)  # released


def test_deleting_the_account_forgets_its_flag_state(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    account_id = seeded(mail, admin, dovecot, mailbox)
    store = app.ctx.mail.flags
    assert store is not None
    cursor = store.cursor(account_id, INBOX)
    assert cursor is not None
    assert len(store.known(account_id, INBOX, cursor.uidvalidity, range(1, 10))) == 4
    ok(app.write("delete-mail-account", {"accountId": account_id}, admin))
    assert store.cursor(account_id, INBOX) is None
    assert store.known(account_id, INBOX, cursor.uidvalidity, range(1, 10)) == {}


class CrashingSave:
    """The real flag state, whose next ``save`` dies: a crash after the pass appended its
    events and before it saved its cursor and map."""

    def __init__(self, inner: FlagStateStore) -> None:
        self.inner, self.armed = inner, True

    def remember(self, entries: Sequence[UidEntry]) -> None:
        self.inner.remember(entries)

    def known(
        self, account_id: str, folder: str, uidvalidity: int, uids: Iterable[int]
    ) -> dict[int, UidEntry]:
        return self.inner.known(account_id, folder, uidvalidity, uids)

    def mapped(self, account_id: str) -> list[UidEntry]:
        return self.inner.mapped(account_id)

    def drop(self, entries: Sequence[UidEntry]) -> None:
        self.inner.drop(entries)

    def cursor(self, account_id: str, folder: str) -> FlagCursor | None:
        return self.inner.cursor(account_id, folder)

    def claim(self, account_id: str, folder: str, token: str, *, now: float, until: float) -> bool:
        return self.inner.claim(account_id, folder, token, now=now, until=until)

    def release(self, account_id: str, folder: str, token: str) -> None:
        self.inner.release(account_id, folder, token)

    def save(
        self, account_id: str, folder: str, cursor: FlagCursor, entries: Sequence[UidEntry]
    ) -> None:
        if self.armed:
            self.armed = False
            raise StoreUnavailable("the process died here")
        self.inner.save(account_id, folder, cursor, entries)

    def forget(self, account_id: str) -> None:
        self.inner.forget(account_id)


def test_a_crash_between_the_events_and_the_cursor_writes_nothing_twice(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser
) -> None:
    app = mail.app
    account_id = seeded(mail, admin, server, box)
    other = OtherClient(server, box)
    try:
        other.add("m0", SEEN)
        other.add("m1", FLAGGED)
    finally:
        other.close()
    store, account = app.ctx.mail.flags, mail.syncer.syncable(account_id)
    assert store is not None and account is not None
    crashing = FlagMirror(app.ctx, CrashingSave(store), FlagWindow())
    with mail.syncer.open_session(account) as session:
        session.select_inbox()
        with pytest.raises(StoreUnavailable):
            crashing.mirror(session, account)
    assert count_events(app, FLAGS_CHANGED) == 2
    mail.poll()  # the restart: reads again from the old cursor, compares, writes nothing
    mail.poll()
    assert count_events(app, FLAGS_CHANGED) == 2
    listed = by_subject(app, admin, account_id)
    assert (listed["m0"]["unread"], listed["m1"]["flagged"]) == (False, True)
