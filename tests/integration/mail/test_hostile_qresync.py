"""A scripted QRESYNC server that lies (``HostileImapServer``): VANISHED naming UIDs it
still has (with their flags in the same answer, or against its own EXISTS), UIDs at or
past UIDNEXT, far more ranges than believed, a HIGHESTMODSEQ that goes down, and a
VANISHED line past what is read. No message is ever deleted on its word, every lie ends
in ``UID SEARCH ALL``, and only the line past the reader's limit fails a poll, once."""

from __future__ import annotations

from application import User
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import count_events, messages
from tests.integration.mail.test_hostile_servers import connect_hostile
from tests.support.hostile_imap import HostileImapServer, HostileMessage, Script

DELETED = "tidings.mail.MessageDeleted"
MOVED = "tidings.mail.MessageFoldersChanged"
CAPABILITIES = "IMAP4rev1 IDLE ENABLE CONDSTORE QRESYNC"


def searches_all(server: HostileImapServer, since: int) -> int:
    return sum(c.upper().endswith(b"UID SEARCH ALL") for c in server.commands[since:])


def resyncs(server: HostileImapServer, since: int) -> int:
    return sum(b"(QRESYNC (" in c.upper() for c in server.commands[since:])


def poll(mail: MailApp, account_id: str) -> None:
    assert mail.outcome(account_id, mail.poll()).error_kind is None


def test_vanished_lies_are_not_believed_and_delete_nothing(mail: MailApp, admin: User) -> None:
    script = Script(
        [HostileMessage(uid) for uid in (1, 2, 3)],
        capabilities=CAPABILITIES,
        highestmodseq=10,
        uidnext="400001",  # the long list's UIDs below are all below it
    )
    with HostileImapServer(script, lifetime=120) as hostile:
        account_id = connect_hostile(mail.app, admin, hostile, "vanished")
        poll(mail, account_id)  # ingested, and the counters saved
        poll(mail, account_id)
        lies = [
            # every UID it still has, with their flags in the same answer
            ([b"(EARLIER) 1:3"], True),
            # every UID, more than MESSAGES and UIDNEXT let leave (no flags to contradict)
            ([b"(EARLIER) 1:3"], False),
            # a UID past UIDNEXT
            ([b"(EARLIER) 2,4:900000"], False),
            # more ranges than are ever believed (100,010, in one 700 KB line)
            ([b"(EARLIER) " + b",".join(b"%d" % u for u in range(5, 200_026, 2))], False),
            # malformed
            ([b"(EARLIER) 1:2:3", b"2"], False),
        ]
        for n, (lines, with_flags) in enumerate(lies, 1):
            # each time HIGHESTMODSEQ and UIDNEXT move while MESSAGES stays: an expunge
            # and an append are possible, and VANISHED is asked
            script.highestmodseq, script.uidnext = 10 + n, str(400_001 + n)
            script.vanished_lines, script.qresync_flags = lines, with_flags
            before = len(hostile.commands)
            poll(mail, account_id)
            assert resyncs(hostile, before) == 1
            assert searches_all(hostile, before) == 1  # the lie is replaced by a search
        assert count_events(mail.app, DELETED) == 0 and count_events(mail.app, MOVED) == 0

        # far more expunges possible than QRESYNC is asked for: the search instead
        script.highestmodseq, script.uidnext = 21, "4000000"
        before = len(hostile.commands)
        poll(mail, account_id)
        assert resyncs(hostile, before) == 0 and searches_all(hostile, before) == 1

        script.highestmodseq = 3  # HIGHESTMODSEQ went down: no QRESYNC, a search
        before = len(hostile.commands)
        poll(mail, account_id)
        assert resyncs(hostile, before) == 0 and searches_all(hostile, before) == 1

        script.vanished_lines, script.highestmodseq = [b"(EARLIER) 2"], 4
        script.qresync_flags = True
        script.messages = [m for m in script.messages if m.uid != 2]  # a real expunge
        before = len(hostile.commands)
        poll(mail, account_id)
        assert resyncs(hostile, before) == 1 and searches_all(hostile, before) == 0
        assert count_events(mail.app, DELETED) == 1

        # a line past what the reader takes (1.4 MB) fails this account's poll once; then
        # INBOX is searched instead of asked QRESYNC (until its UIDVALIDITY changes)
        script.highestmodseq, script.uidnext = 20, "4000007"
        ranges = b",".join(b"%d" % u for u in range(5, 400_000, 2))
        script.vanished_lines = [b"(EARLIER) " + ranges]
        assert mail.outcome(account_id, mail.poll()).error_kind is not None
        for modseq, uidnext in ((20, "4000007"), (22, "4000009")):
            script.highestmodseq, script.uidnext = modseq, uidnext
            before = len(hostile.commands)
            poll(mail, account_id)
            assert resyncs(hostile, before) == 0 and searches_all(hostile, before) == 1
        assert count_events(mail.app, DELETED) == 1
    states = sorted(m["state"] for m in messages(mail.app, admin, accountId=account_id))
    assert states == ["deleted", "ok", "ok"]
