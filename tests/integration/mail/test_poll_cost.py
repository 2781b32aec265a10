"""What a poll costs on the wire against the real Dovecot, counted by a tap in front of
it (``ImapTap``): an unchanged account opens no folder with LIST-STATUS and CONDSTORE
(one LIST in all), one EXAMINE per folder with CONDSTORE alone, and no SEARCH either
way; what changed is still found (an expunge, an expunge plus an append that keep
MESSAGES, a move, a flag change), after a UIDVALIDITY reset of one folder, and across a
restart."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import pytest

from application import User
from application.mail.folder_seen import FolderSeen
from infrastructure.devkit.imap_tap import Cost, ImapTap
from infrastructure.sql.flag_state import SqlFlagState
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import RECENT, connect_payload, count_events, messages, raw_mail
from tests.integration.mail.test_folder_sync import HIDDEN, append, by_subject, imap
from tests.integration.mail.test_moves import DELETED, INGESTED, MOVED, expunge, move, polled
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok

FLAGS_CHANGED = "tidings.mail.MessageFlagsChanged"
SYNCED = 6  # INBOX, Sent, Archive, Drafts, Junk, Trash (the default ``special``)
CONFIGS = {"full": (), "no_list_status": ("LIST-STATUS",), "hidden": HIDDEN}


@pytest.fixture(scope="module", params=list(CONFIGS))
def server(request: pytest.FixtureRequest, dovecot: DovecotServer) -> Iterator[DovecotServer]:
    if request.param == "full":
        yield dovecot
        return
    with DovecotServer(hide_capabilities=CONFIGS[request.param]) as hidden:
        yield hidden


@pytest.fixture
def box(server: DovecotServer) -> DovecotUser:
    return server.add_user("c" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))


@pytest.fixture
def tap(server: DovecotServer) -> Iterator[ImapTap]:
    with ImapTap((server.host, server.port)) as tapped:
        yield tapped


def connected(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser, tap: ImapTap
) -> str:
    payload = connect_payload(server, box)
    payload["imap"] = {**payload["imap"], "host": "127.0.0.1", "port": tap.port}
    account_id: str = ok(mail.app.write("connect-mail-account", payload, admin))["accountId"]
    return account_id


def seeded(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser, tap: ImapTap
) -> str:
    """Two messages in INBOX, one in Archive, synced, then polled until the counters
    are saved (the second poll finds nothing and saves them)."""
    server.deliver(box, [raw_mail(1, subject="a"), raw_mail(2, subject="b")], internal_date=RECENT)
    append(server, box, "Archive", raw_mail(3, subject="c"))
    account_id = connected(mail, admin, server, box, tap)
    polled(mail, account_id)
    polled(mail, account_id)
    return account_id


def poll_cost(mail: MailApp, account_id: str, tap: ImapTap) -> Cost:
    mark = tap.mark()
    polled(mail, account_id)
    return tap.since(mark)


def searched_all(cost: Cost) -> int:
    """The membership's ``UID SEARCH ALL`` commands."""
    return sum(c.upper().endswith(b"UID SEARCH ALL") for c in cost.commands)


def resyncs(cost: Cost) -> int:
    """EXAMINEs with the QRESYNC parameter."""
    return sum(b" EXAMINE " in c and b"(QRESYNC (" in c for c in cost.commands)


@pytest.fixture
def kind(request: pytest.FixtureRequest) -> str:
    """Which of ``CONFIGS`` the module's server is."""
    name: str = request.node.callspec.params["server"]
    return name


def test_an_unchanged_poll_opens_no_folder_and_searches_nothing(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser, tap: ImapTap, kind: str
) -> None:
    account_id = seeded(mail, admin, server, box, tap)
    cost = poll_cost(mail, account_id, tap)
    assert cost.count(b"SEARCH") == 0
    if kind == "full":
        assert cost.count(b"EXAMINE") == 0 and cost.count(b"FETCH") == 0
        assert cost.count(b"LIST") == 1  # the counters of every folder, one round trip
    elif kind == "no_list_status":
        assert cost.count(b"EXAMINE") == SYNCED and cost.count(b"FETCH") == 0
    else:  # the window reads flags: EXAMINE + FETCH where a folder holds messages
        assert cost.count(b"FETCH") == 2 and cost.count(b"EXAMINE") <= 2 * SYNCED
    events = count_events(mail.app, INGESTED), count_events(mail.app, MOVED)
    assert events == (3, 0)


def test_changes_are_found_and_only_changed_folders_are_opened(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser, tap: ImapTap, kind: str
) -> None:
    account_id = seeded(mail, admin, server, box, tap)
    move(server, box, "a", "INBOX", "Archive")
    cost = poll_cost(mail, account_id, tap)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed["a"]["folders"] == ["Archive"] and count_events(mail.app, MOVED) == 1
    if kind == "full":  # INBOX and Archive changed, the other four are not opened
        assert cost.count(b"EXAMINE") <= 4
    if kind != "hidden":  # INBOX's VANISHED and Archive's growth: no SEARCH, no FETCH of flags
        assert searched_all(cost) == 0 and resyncs(cost) >= 1

    with imap(server, box) as client:  # a flag changed in Archive alone
        client.select_folder("Archive")
        client.add_flags(client.search(["SUBJECT", "c"]), [b"\\Flagged"])
    cost = poll_cost(mail, account_id, tap)
    assert by_subject(messages(mail.app, admin, accountId=account_id))["c"]["flagged"] is True
    assert count_events(mail.app, FLAGS_CHANGED) == 1
    if kind == "full":  # HIGHESTMODSEQ moved alone: one QRESYNC EXAMINE, no FETCH
        assert cost.count(b"EXAMINE") == resyncs(cost) == 1
        assert cost.count(b"SEARCH") == cost.count(b"FETCH") == 0

    expunge(server, box, "b", "INBOX")
    cost = poll_cost(mail, account_id, tap)
    if kind == "full":  # VANISHED (EARLIER) named it: one exchange in all
        assert cost.count(b"EXAMINE") == resyncs(cost) == 1
        assert cost.count(b"SEARCH") == cost.count(b"FETCH") == 0
    assert by_subject(messages(mail.app, admin, accountId=account_id))["b"]["state"] == "deleted"
    assert count_events(mail.app, DELETED) == 1
    polled(mail, account_id)
    assert count_events(mail.app, DELETED) == 1 and count_events(mail.app, MOVED) == 1


def test_an_expunge_and_an_append_that_keep_messages_are_found(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser, tap: ImapTap, kind: str
) -> None:
    account_id = seeded(mail, admin, server, box, tap)
    expunge(server, box, "c", "Archive")
    append(server, box, "Archive", raw_mail(4, subject="d"))  # MESSAGES is 1 again
    cost = poll_cost(mail, account_id, tap)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed["c"]["state"] == "deleted" and listed["d"]["folders"] == ["Archive"]
    if kind != "hidden":  # QRESYNC's VANISHED named it: Archive's EXAMINE, no SEARCH
        assert searched_all(cost) == 0 and resyncs(cost) == 1
    else:  # Archive's search, where something may have left
        assert searched_all(cost) == 1


def test_a_grown_folder_is_read_without_a_search(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser, tap: ImapTap, kind: str
) -> None:
    """MESSAGES grew by exactly UIDNEXT's growth: nothing left, so no ``UID SEARCH ALL``;
    a copy that arrived is still placed in both folders."""
    account_id = seeded(mail, admin, server, box, tap)
    with imap(server, box) as client:
        client.select_folder("INBOX")
        client.copy(client.search(["SUBJECT", "a"]), "Archive")
    cost = poll_cost(mail, account_id, tap)
    assert searched_all(cost) == 0  # the arrivals' own search of new UIDs alone
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed["a"]["folders"] == ["Archive", "INBOX"]


def test_a_uidvalidity_reset_of_one_folder_reads_it_again(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser, tap: ImapTap, kind: str
) -> None:
    account_id = seeded(mail, admin, server, box, tap)
    server.set_uidvalidity(box, 777, mailbox="Archive")
    polled(mail, account_id)
    polled(mail, account_id)
    listed = by_subject(messages(mail.app, admin, accountId=account_id))
    assert listed["c"]["folders"] == ["Archive"] and listed["c"]["state"] == "ok"
    assert count_events(mail.app, INGESTED) == 3 and count_events(mail.app, DELETED) == 0
    store = mail.app.ctx.mail.flags
    assert isinstance(store, SqlFlagState)
    assert store.seen(account_id)["Archive"].uidvalidity == 777
    expunge(server, box, "c", "Archive")  # the reset folder's expunges are still found
    polled(mail, account_id)
    assert by_subject(messages(mail.app, admin, accountId=account_id))["c"]["state"] == "deleted"


def test_a_restart_keeps_what_was_believed(
    make_mail_app: MakeMailApp,
    admin: User,
    server: DovecotServer,
    box: DovecotUser,
    tap: ImapTap,
    kind: str,
) -> None:
    first = make_mail_app()
    account_id = seeded(first, admin, server, box, tap)
    second = make_mail_app()  # another process on the same database
    cost = poll_cost(second, account_id, tap)
    assert cost.count(b"SEARCH") == 0
    if kind == "full":
        assert cost.count(b"EXAMINE") == 0
    move(server, box, "a", "INBOX", "Archive")
    polled(second, account_id)
    assert by_subject(messages(second.app, admin, accountId=account_id))["a"]["folders"] == [
        "Archive"
    ]


def test_counters_are_not_saved_while_a_flag_change_is_held(
    mail: MailApp, admin: User, server: DovecotServer, box: DovecotUser, tap: ImapTap, kind: str
) -> None:
    """A folder whose step left something for later keeps its old counters: the next poll
    opens it again (here: a racing poll holds the flag claim)."""
    account_id = seeded(mail, admin, server, box, tap)
    store = mail.app.ctx.mail.flags
    assert isinstance(store, SqlFlagState)
    before = store.seen(account_id)["Archive"]
    with imap(server, box) as client:
        client.select_folder("Archive")
        client.add_flags(client.search(["SUBJECT", "c"]), [b"\\Seen"])
    now = mail.app.ctx.clock.now().timestamp()
    assert store.claim(account_id, "Archive", "racer", now=now, until=now + 600)
    polled(mail, account_id)
    assert store.seen(account_id)["Archive"] == before  # not saved: the flags were busy
    store.release(account_id, "Archive", "racer")
    polled(mail, account_id)
    assert by_subject(messages(mail.app, admin, accountId=account_id))["c"]["unread"] is False
    after = store.seen(account_id)["Archive"]
    assert isinstance(after, FolderSeen)
    if kind != "hidden":  # HIGHESTMODSEQ moved; without CONDSTORE the counters did not
        assert after != before
