"""Where each message is: moves, copies, expunges and deletions, decided once per
account pass (``MembershipPass``), after the arrivals of every synced folder.

    claim the account's membership pass (one at a time: an older view must not land
    over a newer one)
    -> the UID map (``mail_flag_uids``: (folder, UID) -> message, written as pages are
       stored, so a message seen again in another folder has a row there too)
    -> per synced folder: EXAMINE + ``UID SEARCH ALL``; mapped UIDs of the folder's
       current UIDVALIDITY that the server no longer has are expunged (the poll leaves
       out folders whose counters are unchanged, and passes those that only grew as
       ``unexpunged``: read, nothing gone, no SEARCH; ``folder_seen.PollPlan``; with
       QRESYNC the UIDs its VANISHED (EARLIER) named, ``resync``, checked by count)
    -> per message with a row in a folder read now: its folders = the folders of its
       remaining rows; compared with its stream (``stored_folders``):
         differs, not empty -> ``MessageFoldersChanged {folders, added, removed}``
         empty             -> ``MessageDeleted`` (gone from every synced folder)
    -> the events appended (a collision reloads and compares again), then the expunged
       rows dropped from the map.

Deletion is per pass, not per folder: a message expunged from INBOX whose copy in
Archive was already stored keeps a row in Archive, so the pass records a move; one whose
new folder is paged later in the same pass got its row there before this step runs. A
pass ends at the first failing folder (the folder pass raises before this step), so a
message is never deleted on a partial view. A folder's answer is believed only when its
UID count equals EXISTS and every UID is below UIDNEXT (a server answering "nothing"
for a full folder deletes nothing). Rows of folders not read in this pass (no longer
listed) and rows of an older UIDVALIDITY still place their message: unknown is never
deleted. A deleted message stays deleted (its stream takes no later membership event);
a ``deferred`` one is held until its body came. A restart repeats the comparison: the
map's rows are dropped only after the events are durable, and an event is written only
when the stream differs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable
from uuid import UUID, uuid4

from application.context import Context
from application.errors import ConcurrencyConflict
from application.mail.flag_state import UidEntry
from application.mail.resync import Vanished
from domain.events import DomainEvent
from domain.mail_account import MailAccount
from domain.message import (
    MessageDeleted,
    MessageFoldersChanged,
    awaiting_body,
    stored_folders,
)

log = logging.getLogger("tidings.membership")

ATTEMPTS = 5
CLAIM_SECONDS = 600.0  # as the flag pass's: well past the poll's deadline
CLAIM_FOLDER = ""  # the claim's key in the flag claims (no folder has an empty name)
LOAD_CHUNK = 500  # streams loaded per read


@dataclass(frozen=True, slots=True)
class FolderUids:
    """One folder's UIDs as the server has them now (None: the answer was not believed)."""

    uidvalidity: int
    uids: frozenset[int] | None


@runtime_checkable
class MembershipReader(Protocol):
    """A logged-in session that reads a folder's UIDs (``ImapMailboxSession``)."""

    def folder_uids(self, folder: str) -> FolderUids:
        """EXAMINE ``folder`` and ``UID SEARCH ALL`` (raises ``MailProviderError``)."""
        ...


class UidMap(Protocol):
    """The UID map's side that the pass needs (``SqlFlagState``)."""

    def mapped(self, account_id: str) -> list[UidEntry]:
        """Every row of the account."""
        ...

    def drop(self, entries: Sequence[UidEntry]) -> None:
        """Remove these rows (by account, folder, UID), in one write."""
        ...

    def claim(
        self, account_id: str, folder: str, token: str, *, now: float, until: float
    ) -> bool: ...

    def release(self, account_id: str, folder: str, token: str) -> None: ...


@dataclass(frozen=True)
class Placed:
    moved: int = 0  # MessageFoldersChanged appended
    deleted: int = 0  # MessageDeleted appended
    expunged: int = 0  # map rows the server no longer has
    held: int = 0  # deferred streams left for a later pass
    unbelieved: int = 0  # folders whose answer was not believed
    busy: bool = False


class MembershipPass:
    """Thread-safe (no state of its own): the poll's pool threads share one."""

    def __init__(self, ctx: Context, uid_map: UidMap, claim_seconds: float = CLAIM_SECONDS):
        self.ctx = ctx
        self.uid_map = uid_map
        self.claim_seconds = claim_seconds

    def run(
        self,
        session: object,
        account: MailAccount,
        folders: Sequence[str],
        check: Callable[[], None],
        *,
        unexpunged: Sequence[str] = (),
        vanished: Mapping[str, Vanished] | None = None,
    ) -> Placed:
        """The pass over ``folders`` (the synced folders to search, INBOX included),
        ``unexpunged`` (folders read without a search: their counters say nothing left
        them since the last believed pass, so only their new rows matter) and
        ``vanished`` (folders whose expunges a QRESYNC EXAMINE named: searched after all
        when the mapped rows it names outnumber ``most_gone``)."""
        if not isinstance(session, MembershipReader):
            return Placed()
        account_id, token = str(account.id), uuid4().hex
        now = self.ctx.clock.now().timestamp()
        claimed = self.uid_map.claim(
            account_id, CLAIM_FOLDER, token, now=now, until=now + self.claim_seconds
        )
        if not claimed:
            log.info("membership.busy account_id=%s", account_id)
            return Placed(busy=True)
        try:
            return self._run(
                session, account, folders, check, unexpunged=unexpunged, vanished=vanished or {}
            )
        finally:
            self.uid_map.release(account_id, CLAIM_FOLDER, token)

    def _run(
        self,
        session: MembershipReader,
        account: MailAccount,
        folders: Sequence[str],
        check: Callable[[], None],
        *,
        unexpunged: Sequence[str],
        vanished: Mapping[str, Vanished],
    ) -> Placed:
        account_id = str(account.id)
        rows = self.uid_map.mapped(account_id)
        read: set[str] = set(unexpunged)
        gone: list[UidEntry] = []
        unbelieved = 0
        search = list(folders)
        for folder, said in vanished.items():
            named = [
                r
                for r in rows
                if r.folder == folder and r.uidvalidity == said.uidvalidity and r.uid in said.uids
            ]
            if len(named) > said.most_gone:  # more than can have left: not believed
                log.warning("membership.vanished_unbelieved account_id=%s", account_id)
                search.append(folder)
                continue
            read.add(folder)
            gone += named
        for folder in dict.fromkeys(search):
            check()
            answer = session.folder_uids(folder)
            if answer.uids is None:
                unbelieved += 1
                log.warning("membership.unbelieved account_id=%s", account_id)
                continue
            read.add(folder)
            gone += [
                r
                for r in rows
                if r.folder == folder
                and r.uidvalidity == answer.uidvalidity
                and r.uid not in answer.uids
            ]
        dropped = {(r.folder, r.uid) for r in gone}
        wanted: dict[UUID, set[str]] = {}
        for r in rows:
            if r.folder in read:
                wanted.setdefault(r.message_id, set())
        for r in rows:
            if r.message_id in wanted and (r.folder, r.uid) not in dropped:
                wanted[r.message_id].add(r.folder)
        moved, deleted, held = self._append(account, wanted)
        self.uid_map.drop(gone)
        outcome = Placed(moved, deleted, len(gone), held, unbelieved)
        log.info(
            "membership.ok account_id=%s moved=%d deleted=%d expunged=%d held=%d unbelieved=%d",
            account_id,
            outcome.moved,
            outcome.deleted,
            outcome.expunged,
            outcome.held,
            outcome.unbelieved,
        )
        return outcome

    def _append(self, account: MailAccount, wanted: dict[UUID, set[str]]) -> tuple[int, int, int]:
        """The events of the streams whose stored folders differ: (moved, deleted, held)."""
        moved = deleted = held = 0
        ids = sorted(wanted, key=str)
        for start in range(0, len(ids), LOAD_CHUNK):
            chunk = {i: wanted[i] for i in ids[start : start + LOAD_CHUNK]}
            m, d, h = self._append_chunk(account, chunk)
            moved, deleted, held = moved + m, deleted + d, held + h
        return moved, deleted, held

    def _append_chunk(
        self, account: MailAccount, wanted: dict[UUID, set[str]]
    ) -> tuple[int, int, int]:
        for _ in range(ATTEMPTS):
            streams = self.ctx.store.load_many(list(wanted))
            now = self.ctx.clock.now()
            held = sum(1 for s in streams.values() if awaiting_body(s))
            events = [
                e
                for i, stream in streams.items()
                if not awaiting_body(stream)
                for e in [placement_event(account, i, stream, wanted[i], now)]
                if e is not None
            ]
            if not events:
                return 0, 0, held
            try:
                self.ctx.store.append(events)
            except ConcurrencyConflict:
                continue
            deleted = sum(1 for e in events if isinstance(e, MessageDeleted))
            return len(events) - deleted, deleted, held
        raise ConcurrencyConflict("membership changes kept colliding; the next poll retries")


def placement_event(
    account: MailAccount,
    stream_id: UUID,
    stream: list[DomainEvent],
    folders: set[str],
    now: datetime,
) -> MessageFoldersChanged | MessageDeleted | None:
    """The event that makes ``stream`` say the message is in ``folders`` (empty: gone
    from every synced folder); None when it says so already, or was deleted before."""
    stored = stored_folders(stream)
    if not stored:  # no message, or deleted: a deleted message stays deleted
        return None
    account_id, version = str(account.id), len(stream) + 1
    if not folders:
        return MessageDeleted(
            originator_id=stream_id,
            originator_version=version,
            timestamp=now,
            tenant_id=account.tenant_id,
            account_id=account_id,
            reason="expunged",
        )
    if set(stored) == folders:
        return None
    return MessageFoldersChanged(
        originator_id=stream_id,
        originator_version=version,
        timestamp=now,
        tenant_id=account.tenant_id,
        account_id=account_id,
        folders=sorted(folders),
        added=sorted(folders - set(stored)),
        removed=sorted(set(stored) - folders),
    )
