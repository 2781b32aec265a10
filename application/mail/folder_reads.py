"""The poll's QRESYNC steps (``AccountSync``): a changed folder EXAMINEd with
``(QRESYNC (uidvalidity modseq))`` (``resync``), and its VANISHED answer made into what
the membership pass checks and takes (``vanished_of``). Rules: ``resync``'s module
docstring; when: ``folder_seen.PollPlan.resync_from``."""

from __future__ import annotations

from application.context import Context
from application.mail.folder_seen import FolderSeen, PollPlan
from application.mail.resync import Resynced, ResyncSession, Vanished
from domain.mail_account import MailAccount

# At most this many expunges are asked of QRESYNC: its VANISHED answer is one line, and a
# line past 1 MB fails the read; more than this is left to ``UID SEARCH ALL``.
MAX_GONE_ASKED = 20_000


def resync(
    ctx: Context, session: object, account: MailAccount, plan: PollPlan, folder: str
) -> tuple[Resynced, int] | None:
    """A QRESYNC EXAMINE of ``folder`` where its HIGHESTMODSEQ moved since the last
    complete poll: the answer, and the modseq asked from (the lower of the believed
    counters' and the flag cursor's, so the answer serves both the membership pass and
    the flag mirror). None without QRESYNC, or with nothing to ask."""
    before, now = plan.resync_from(folder), plan.now(folder)
    if before is None or before.highestmodseq is None or not isinstance(session, ResyncSession):
        return None
    if now is None or most_gone(before, now.uidnext, now.messages) > MAX_GONE_ASKED:
        return None  # a VANISHED answer that long is one line past what a reader takes
    asked = before.highestmodseq
    store = ctx.mail.flags
    cursor = store.cursor(str(account.id), folder) if store is not None else None
    if cursor is not None and cursor.uidvalidity == before.uidvalidity and cursor.modseq:
        asked = min(asked, cursor.modseq)
    answer = session.resync(folder, before.uidvalidity, asked)
    return None if answer is None else (answer, asked)


def vanished_of(
    before: FolderSeen | None, resynced: tuple[Resynced, int] | None
) -> Vanished | None:
    """What the membership pass takes of a QRESYNC answer: its VANISHED UIDs, with how
    many mapped rows may have left at most (MESSAGES and UIDNEXT since ``before``); None
    when the answer was not believed or there is nothing to check it against."""
    if before is None or resynced is None:
        return None
    answer, _ = resynced
    status = answer.status
    if answer.vanished is None or status.uidnext is None:
        return None
    if status.uidvalidity != before.uidvalidity:
        return None
    return Vanished(
        status.uidvalidity, answer.vanished, most_gone(before, status.uidnext, status.exists)
    )


def most_gone(before: FolderSeen, uidnext: int, messages: int) -> int:
    """How many messages can have left a folder since ``before``: every one it had and
    every UID given out since, less those it has now."""
    return max(0, before.messages + max(0, uidnext - before.uidnext) - messages)
