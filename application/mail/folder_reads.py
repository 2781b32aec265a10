"""The poll's QRESYNC steps (``AccountSync``): a changed folder EXAMINEd with
``(QRESYNC (uidvalidity modseq))`` (``resync``), and its VANISHED answer made into what
the membership pass checks and takes (``vanished_of``). Rules: ``resync``'s module
docstring; when: ``folder_seen.PollPlan.resync_from``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from application.context import Context
from application.mail.folder_seen import FolderSeen, PollPlan
from application.mail.gmail_labels import labelled_folder
from application.mail.ports import MailboxAnswerTooLarge
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
    try:
        answer = session.resync(folder, before.uidvalidity, asked)
    except MailboxAnswerTooLarge:
        plan.refuse_qresync(folder)  # the next polls search it: the account goes on
        raise
    return None if answer is None else (answer, asked)


class RemapWalk(Protocol):
    """The UID map's rebuild as the membership pass keeps it (``MembershipPass``)."""

    def remap_pending(
        self, account_id: str, folder: str, uidvalidity: int, uidnext: int
    ) -> bool: ...

    def remap_grew(self, account_id: str, folder: str, uidvalidity: int, uidnext: int) -> None: ...


@dataclass(frozen=True)
class MembershipReads:
    """How the membership pass reads each synced folder this poll (``membership_reads``);
    a folder in none of them is not read at all."""

    search: list[str] = field(default_factory=list)
    unexpunged: list[str] = field(default_factory=list)
    vanished: dict[str, Vanished] = field(default_factory=dict)

    @property
    def any(self) -> bool:
        return bool(self.search or self.unexpunged or self.vanished)


def membership_reads(
    plan: PollPlan,
    membership: RemapWalk,
    account: MailAccount,
    session: object,
    *,
    names: Sequence[str],
    resynced: Mapping[str, tuple[Resynced, int] | None],
) -> MembershipReads:
    """Per synced folder: not read (counters unchanged), read without a search (it only
    grew), by its VANISHED (QRESYNC), else searched. Always searched: Gmail's All Mail
    (its labels move no counter but HIGHESTMODSEQ) and a folder whose older UIDs the UID
    map's rebuild has still to walk."""
    account_id = str(account.id)
    labelled = labelled_folder(account, session)
    reads = MembershipReads()
    for name in names:
        before = plan.before(name)
        forced = (labelled is not None and name == labelled[0]) or (
            before is not None
            and membership.remap_pending(account_id, name, before.uidvalidity, before.uidnext)
        )
        read = "search" if forced else plan.membership(name)
        said = None if forced else vanished_of(plan.resync_from(name), resynced.get(name))
        if read == "skip":
            continue
        if said is not None:
            reads.vanished[name] = said
        elif read == "unexpunged":
            reads.unexpunged.append(name)
        else:
            reads.search.append(name)
            continue
        now = plan.now(name)  # read without a search: the walk goes on past its new UIDs
        if before is not None and now is not None and now.uidnext > before.uidnext:
            membership.remap_grew(account_id, name, before.uidvalidity, now.uidnext)
    return reads


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
