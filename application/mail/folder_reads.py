"""The poll's QRESYNC steps (``AccountSync``): a changed folder EXAMINEd with
``(QRESYNC (uidvalidity modseq))`` (``resync``), and its VANISHED answer made into what
the membership pass checks and takes (``vanished_of``). Rules: ``resync``'s module
docstring; when: ``folder_seen.PollPlan.resync_from``."""

from __future__ import annotations

from application.context import Context
from application.mail.folder_seen import FolderSeen, PollPlan
from application.mail.resync import Resynced, ResyncSession, Vanished
from domain.mail_account import MailAccount


def resync(
    ctx: Context, session: object, account: MailAccount, plan: PollPlan, folder: str
) -> tuple[Resynced, int] | None:
    """A QRESYNC EXAMINE of ``folder`` where its HIGHESTMODSEQ moved since the last
    complete poll: the answer, and the modseq asked from (the lower of the believed
    counters' and the flag cursor's, so the answer serves both the membership pass and
    the flag mirror). None without QRESYNC, or with nothing to ask."""
    before = plan.resync_from(folder)
    if before is None or before.highestmodseq is None or not isinstance(session, ResyncSession):
        return None
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
    most = before.messages + max(0, status.uidnext - before.uidnext) - status.exists
    return Vanished(status.uidvalidity, answer.vanished, max(0, most))
