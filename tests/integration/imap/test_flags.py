"""``ImapMailboxSession.read_flags`` against the real Dovecot: the baseline read in UID
spans, CHANGEDSINCE with only what changed, an unchanged INBOX with no FETCH (the last
EXAMINE's status reused), the window when the cursor says CONDSTORE is not believed, and
a UIDVALIDITY change."""

from __future__ import annotations

from imapclient import IMAPClient

from application.mail.flag_state import FlagCursor, FlagWindow
from infrastructure.imap import ImapAdapterSettings
from tests.integration.imap.conftest import OpenSession
from tests.support.dovecot import DovecotServer, DovecotUser

WINDOW = FlagWindow(newest=2, sweep=2)


def mail(n: int) -> bytes:
    return f"Subject: flags {n}\r\nMessage-ID: <{n}@flags.example>\r\n\r\nbody {n}\r\n".encode()


def test_read_flags_by_condstore_then_by_the_window(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [mail(i) for i in range(7)])
    dovecot.index(user)
    session = open_session(ImapAdapterSettings(connect_timeout=5, read_timeout=30, search_span=3))
    assert "CONDSTORE" in session.capabilities

    full = session.read_flags(None, WINDOW)  # spans 1:3, 4:6, 7:*
    assert (full.mode, sorted(full.flags)) == ("full", list(range(1, 8)))
    assert full.highestmodseq is not None
    cursor = FlagCursor(full.uidvalidity, full.highestmodseq)

    unchanged = session.read_flags(cursor, WINDOW)
    assert (unchanged.mode, unchanged.flags) == ("unchanged", {})

    with IMAPClient(dovecot.host, dovecot.port, ssl=False, timeout=30) as other:
        other.login(user.name, user.password)
        other.select_folder("INBOX")
        other.add_flags([2, 6], [b"\\Seen", b"$Work"])
    # The last EXAMINE's status is reused (a poll's arrivals just took one): the change
    # is the next EXAMINE's news, never lost, since the cursor stays at that status.
    assert session.read_flags(cursor, WINDOW).mode == "unchanged"
    session.select_inbox()
    changed = session.read_flags(cursor, WINDOW)
    assert (changed.mode, sorted(changed.flags), changed.stale_modseqs) == (
        "changedsince",
        [2, 6],
        False,
    )
    assert changed.flags[6].flags == ("$Work", "\\Seen")

    distrusted = FlagCursor(full.uidvalidity, full.highestmodseq, 1, unreliable=True)
    first = session.read_flags(distrusted, WINDOW)
    assert (first.mode, sorted(first.flags), first.sweep_from) == ("window", [1, 2, 6, 7], 3)
    second = session.read_flags(FlagCursor(full.uidvalidity, None, 3, True), WINDOW)
    assert (sorted(second.flags), second.sweep_from) == ([3, 4, 6, 7], 5)
    third = session.read_flags(FlagCursor(full.uidvalidity, None, 5, True), WINDOW)
    assert (sorted(third.flags), third.sweep_from) == ([5, 6, 7], 1)

    moved = session.read_flags(FlagCursor(full.uidvalidity + 1, full.highestmodseq), WINDOW)
    assert (moved.mode, len(moved.flags)) == ("full", 7)  # another UIDVALIDITY: read again
