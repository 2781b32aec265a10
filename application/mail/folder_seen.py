"""What a poll may leave unopened: each synced folder's counters as the last complete
poll believed them (``FolderSeen``: UIDVALIDITY, UIDNEXT, MESSAGES, HIGHESTMODSEQ), and
one poll's decisions against them (``PollPlan``).

The counters of now come from one ``LIST ... RETURN (STATUS (...))`` at the poll's
start where the server offers LIST-STATUS (nothing selected yet: Dovecot answers STATUS
of the selected folder from that session's stale view), else from the first EXAMINE of
the folder in the poll (the arrivals' own). Either is taken before any read of the
folder, so whatever changes after it moves the counters past what is saved, and the
next poll reads again.

- **Arrivals** are skipped when LIST-STATUS says UIDVALIDITY and UIDNEXT are as
  believed: no message came (UIDNEXT grows with every append).
- **QRESYNC** (where the poll's session enabled it): a folder whose HIGHESTMODSEQ moved
  is EXAMINEd with ``(QRESYNC (uidvalidity modseq))`` from the believed counters'
  modseq (``resync_from``; Dovecot raises HIGHESTMODSEQ on an expunge, as RFC 7162
  requires of a QRESYNC server): its VANISHED UIDs go to the membership pass instead of
  a SEARCH, its changed flags to the flag mirror instead of a FETCH (``resync``).
  A folder whose QRESYNC answer once passed what the session reads (a VANISHED line
  past 1 MB: a server ignoring the bound asked) fails that poll, and is not asked again
  until its UIDVALIDITY changes (``NO_QRESYNC``): the SEARCH reads it instead, so the
  account goes on syncing.
- **Flags** are skipped (``FlagMirror``, no EXAMINE) when CONDSTORE's HIGHESTMODSEQ is
  the flag cursor's; without CONDSTORE the window reads them every poll.
- **Membership**: counters as believed -> the folder is not read at all; MESSAGES grew
  by exactly UIDNEXT's growth -> nothing was expunged (EmailEngine's arithmetic), the
  folder is read without ``UID SEARCH ALL`` (its new rows still place their messages);
  anything else (an expunge, or an expunge and an append that keep MESSAGES) -> SEARCH.
  An expunge alone keeps UIDNEXT and lowers MESSAGES; with an append as well MESSAGES
  may stay but UIDNEXT moves: (UIDNEXT, MESSAGES) unchanged means neither happened.

A folder's counters are saved only when every step of it completed in this poll: no
page left waiting for the download budget, no flag change held (a deferred stream or a
racing poller), the membership pass believed, not busy and holding nothing. Otherwise
the old counters stay and differ from the server's, so the next poll reads the folder
again. A failed poll saves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal, Protocol, runtime_checkable

from application.mail.folder_listing import FolderStatus
from application.mail.ports import MailboxStatus

MembershipRead = Literal["skip", "unexpunged", "search"]


# Saved as a folder's HIGHESTMODSEQ (which is never 0): QRESYNC is not asked of this
# folder again until its UIDVALIDITY changes, since its answer once passed what is read.
NO_QRESYNC = 0


@dataclass(frozen=True, slots=True)
class FolderSeen:
    uidvalidity: int
    uidnext: int
    messages: int
    highestmodseq: int | None = None


def seen_of(status: FolderStatus | MailboxStatus | None) -> FolderSeen | None:
    """The counters of a LIST-STATUS or EXAMINE answer; None unless all three are there."""
    if status is None:
        return None
    messages = status.exists if isinstance(status, MailboxStatus) else status.messages
    if status.uidvalidity is None or status.uidnext is None or messages is None:
        return None
    return FolderSeen(status.uidvalidity, status.uidnext, messages, status.highestmodseq)


@runtime_checkable
class StatusSession(Protocol):
    """A logged-in session that tells folders' counters (``ImapMailboxSession``)."""

    def folder_statuses(self) -> Mapping[str, FolderStatus] | None:
        """Every folder's counters in one round trip (LIST-STATUS); None without it."""
        ...

    def examined(self, folder: str) -> MailboxStatus | None:
        """The status of the session's first EXAMINE of ``folder`` (None: not opened)."""
        ...


class FolderSeenStore(Protocol):
    def seen(self, account_id: str) -> dict[str, FolderSeen]:
        """The account's folders' counters as last saved, by folder name."""
        ...

    def save_seen(self, account_id: str, seen: Mapping[str, FolderSeen]) -> None:
        """Upsert these folders' counters, in one write."""
        ...


def same_counters(a: FolderSeen, b: FolderSeen) -> bool:
    return (a.uidvalidity, a.uidnext, a.messages) == (b.uidvalidity, b.uidnext, b.messages)


def membership_read(before: FolderSeen | None, now: FolderSeen | None) -> MembershipRead:
    """How the membership pass reads a folder whose counters went ``before`` -> ``now``."""
    if before is None or now is None or before.uidvalidity != now.uidvalidity:
        return "search"
    was, is_now = before.highestmodseq, now.highestmodseq
    if was is not None and is_now is not None and is_now < was:
        return "search"  # HIGHESTMODSEQ went down: the server is not the one believed
    if same_counters(before, now):
        return "skip"
    grew = now.uidnext - before.uidnext
    if grew > 0 and now.messages - before.messages == grew:
        return "unexpunged"
    return "search"


class PollPlan:
    """One poll's view: built at its start (``start``), asked per folder, saved at its
    end (``save``). Not shared between threads (one per poll)."""

    def __init__(
        self,
        session: object,
        store: FolderSeenStore | None,
        account_id: str,
    ) -> None:
        self._session = session if isinstance(session, StatusSession) else None
        self._store = store
        self._account_id = account_id
        self._before: dict[str, FolderSeen] = {}
        self._listed: dict[str, FolderSeen] = {}
        self._incomplete: set[str] = set()
        if store is None or self._session is None:
            return
        self._before = store.seen(account_id)
        statuses = self._session.folder_statuses()
        for name, status in (statuses or {}).items():
            seen = seen_of(status)
            if seen is not None:
                self._listed[name] = seen

    def now(self, folder: str) -> FolderSeen | None:
        """The folder's counters of this poll: LIST-STATUS's, else its first EXAMINE's."""
        listed = self._listed.get(folder)
        if listed is not None or self._session is None:
            return listed
        return seen_of(self._session.examined(folder))

    def unopened(self, folder: str) -> bool:
        """No message came since the last complete poll (LIST-STATUS's UIDVALIDITY and
        UIDNEXT as believed): the arrivals are not read."""
        before, listed = self._before.get(folder), self._listed.get(folder)
        return (
            before is not None
            and listed is not None
            and (before.uidvalidity, before.uidnext) == (listed.uidvalidity, listed.uidnext)
        )

    def before(self, folder: str) -> FolderSeen | None:
        """The counters the last complete poll believed (None: none, or forgotten)."""
        return self._before.get(folder)

    def resync_from(self, folder: str) -> FolderSeen | None:
        """The counters a QRESYNC EXAMINE asks changes since: the last complete poll's,
        when they carry a HIGHESTMODSEQ of the folder's present UIDVALIDITY and this
        poll's is higher; None: no QRESYNC for the folder (nothing changed, or the
        HIGHESTMODSEQ went down: FETCH and SEARCH read it instead)."""
        before, now = self._before.get(folder), self.now(folder)
        if before is None or before.highestmodseq in (None, NO_QRESYNC) or now is None:
            return None
        if now.uidvalidity != before.uidvalidity or now.highestmodseq is None:
            return None
        return before if now.highestmodseq > before.highestmodseq else None

    def membership(self, folder: str) -> MembershipRead:
        return membership_read(self._before.get(folder), self.now(folder))

    def refuse_qresync(self, folder: str) -> None:
        """The folder's QRESYNC answer passed what the session reads (a lying server's
        VANISHED): saved at once (the poll fails), so later polls search the folder
        instead, until its UIDVALIDITY changes."""
        before = self._before.get(folder)
        if before is None or self._store is None:
            return
        refused = replace(before, highestmodseq=NO_QRESYNC)
        self._store.save_seen(self._account_id, {folder: refused})
        self._before[folder] = refused

    def forget(self, folders: Iterable[str]) -> None:
        """These folders were read from no cursor (new, reset, or their state forgotten):
        nothing believed of them before counts now."""
        for name in folders:
            self._before.pop(name, None)

    def incomplete(self, folders: Iterable[str]) -> None:
        """These folders left something for a later poll: their counters are not saved."""
        self._incomplete.update(folders)

    def save(self, folders: Iterable[str]) -> None:
        """After a poll that completed: the counters of ``folders`` (the synced ones)
        that completed every step."""
        if self._store is None:
            return
        done = {}
        for name in folders:
            now, before = self.now(name), self._before.get(name)
            if now is not None and _refused(before, now):
                now = replace(now, highestmodseq=NO_QRESYNC)
            if name not in self._incomplete and now is not None and now != before:
                done[name] = now
        if done:
            self._store.save_seen(self._account_id, done)


def _refused(before: FolderSeen | None, now: FolderSeen) -> bool:
    """QRESYNC stays refused for the folder while its UIDVALIDITY is the same."""
    return (
        before is not None
        and before.highestmodseq == NO_QRESYNC
        and before.uidvalidity == now.uidvalidity
    )
