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
chosen by the setting) and rows of an older UIDVALIDITY still place their message:
unknown is never deleted. Rows of a folder a believed listing found gone from the server
(marked ``FOLDER_GONE`` by the folder pass) place nothing: a message only there is
deleted, one with a copy elsewhere moves, and the rows leave the map. A deleted message
is restored (``MessageRestored``, its folders as found now, its state as before) when a
row of the map places it again: its folder came back, or the server had hidden it; one
retention expired stays deleted. A ``deferred`` one is held until its body came. A
restart repeats the comparison: the map's rows are dropped only after the events are
durable, and an event is written only when the stream differs.

Messages stored before the map existed get their rows here (``uid_remap``: bounded per
folder and poll, by EMAILID, X-GM-MSGID or the version-1 fingerprint).

Gmail (``gmail_labels``): All Mail is read with its labels instead of ``UID SEARCH ALL``,
and a message's labels join the folders of its rows (a message whose labels are not
known now is held). Streams name folders as they were called when the event was
written; the comparison is with the names now (``MailAccount.renamed_name``), since the
read models rename on ``MailFolderRenamed``, so a rename costs no event per message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, cast, runtime_checkable
from uuid import UUID, uuid4

from application.context import Context
from application.errors import ConcurrencyConflict
from application.mail.flag_state import UidEntry
from application.mail.folder_state import FOLDER_GONE
from application.mail.gmail_labels import FolderLabels, LabelReader, labelled_folder, with_labels
from application.mail.resync import Vanished
from application.mail.uid_remap import RemapStore, UidRemap
from domain.events import DomainEvent
from domain.mail_account import MailAccount
from domain.message import (
    MessageDeleted,
    MessageFoldersChanged,
    MessageRestored,
    awaiting_body,
    state_before_deletion,
    stored_folders,
)
from domain.message_retention import MessageExpired

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
    uidnext: int | None = None  # the EXAMINE's, where known (the UID map's rebuild ends there)


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
        # Rows for messages stored before the map existed (a store that keeps its walk).
        self.remap = UidRemap(ctx, uid_map) if isinstance(uid_map, RemapStore) else None

    def remap_pending(self, account_id: str, folder: str, uidvalidity: int, uidnext: int) -> bool:
        """The UID map's rebuild has UIDs below ``uidnext`` of ``folder`` still to walk: the
        poll reads the folder (a search) even when its counters did not move."""
        if self.remap is None:
            return False
        return self.remap.store.remap_from(account_id, folder, uidvalidity) < uidnext

    def remap_grew(self, account_id: str, folder: str, uidvalidity: int, uidnext: int) -> None:
        """A folder the rebuild had walked grew to ``uidnext`` and is read without a
        search: its new UIDs got their rows as they were stored, so the walk goes on from
        ``uidnext`` (else it would count as unwalked and be searched)."""
        if self.remap is not None:
            self.remap.store.save_remap(account_id, folder, uidvalidity, uidnext)

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
        when the mapped rows it names outnumber ``most_gone``); ``account`` as loaded
        after this poll's listing (its folder events name All Mail and renames)."""
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
        # Rows of a folder a believed listing found gone (``FOLDER_GONE``) place nothing:
        # their messages are compared now. Rows of a folder merely not chosen any more
        # still place theirs (unknown is never deleted).
        gone = [r for r in rows if r.uidvalidity == FOLDER_GONE]
        read = {r.folder for r in gone} | set(unexpunged)
        unbelieved = 0
        labelled = labelled_folder(account, session)
        labels: FolderLabels | None = None
        believed, named, unbelieved_vanished = _by_vanished(account_id, rows, vanished)
        read |= believed
        gone += named
        search = [*folders, *unbelieved_vanished]  # a VANISHED not believed: searched
        for folder in dict.fromkeys(search):
            check()
            answer = _read(session, folder, labelled)
            if isinstance(answer, FolderLabels):
                labels = answer
            if answer.uids is None:
                unbelieved += 1
                log.warning("membership.unbelieved account_id=%s", account_id)
                continue
            read.add(folder)
            if self.remap is not None:
                here = {r.uid for r in rows if r.folder == folder}
                rows += self.remap.rows_for(
                    session,
                    account_id,
                    folder,
                    uidvalidity=answer.uidvalidity,
                    uids=answer.uids,
                    mapped=here,
                    uidnext=getattr(answer, "uidnext", None),
                )
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
        unlabelled = 0
        # An \\All folder read without labels (no X-GM-EXT-1) is a folder like any other.
        if labelled is not None and not (labels is None and labelled[0] in search):
            unlabelled = with_labels(wanted, rows, dropped, labelled, labels)
        moved, deleted, held = self._append(account, wanted)
        self.uid_map.drop(gone)
        outcome = Placed(moved, deleted, len(gone), held + unlabelled, unbelieved)
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
            restored = sum(1 for e in events if isinstance(e, MessageRestored))
            if restored:
                log.warning("membership.restored account_id=%s count=%d", account.id, restored)
            return len(events) - deleted, deleted, held
        raise ConcurrencyConflict("membership changes kept colliding; the next poll retries")


def _by_vanished(
    account_id: str, rows: Sequence[UidEntry], vanished: Mapping[str, Vanished]
) -> tuple[set[str], list[UidEntry], list[str]]:
    """The folders read by their VANISHED answer, the mapped rows those name, and the
    folders whose answer names more rows than their counters let leave
    (``Vanished.most_gone``: not believed)."""
    believed: set[str] = set()
    gone: list[UidEntry] = []
    unbelieved: list[str] = []
    for folder, said in vanished.items():
        named = [
            r
            for r in rows
            if r.folder == folder and r.uidvalidity == said.uidvalidity and r.uid in said.uids
        ]
        if len(named) > said.most_gone:
            log.warning("membership.vanished_unbelieved account_id=%s", account_id)
            unbelieved.append(folder)
        else:
            believed.add(folder)
            gone += named
    return believed, gone, unbelieved


def _read(
    session: MembershipReader, folder: str, labelled: tuple[str, object] | None
) -> FolderUids | FolderLabels:
    """The folder's UIDs now; Gmail's All Mail with its labels."""
    if labelled is not None and folder == labelled[0]:
        answer = cast(LabelReader, session).folder_labels(folder)
        if answer is not None:
            return answer
    return session.folder_uids(folder)


def placement_event(
    account: MailAccount,
    stream_id: UUID,
    stream: list[DomainEvent],
    folders: set[str],
    now: datetime,
) -> MessageFoldersChanged | MessageDeleted | MessageRestored | None:
    """The event that makes ``stream`` say the message is in ``folders`` (empty: gone
    from every synced folder); None when it says so already, or when it was deleted and
    may not come back (expired by retention, or not found now)."""
    # A renamed folder's messages keep its old name in their streams; the read models
    # renamed them on ``MailFolderRenamed``, so the comparison is with the name now.
    found = stored_folders(stream)
    account_id, version = str(account.id), len(stream) + 1
    if found is None:
        return None
    if not found:  # deleted: back only when found again after an expunge (not expired)
        state = state_before_deletion(stream)
        if not folders or state is None or not _expunged_last(stream):
            return None
        return MessageRestored(
            originator_id=stream_id,
            originator_version=version,
            timestamp=now,
            tenant_id=account.tenant_id,
            account_id=account_id,
            folders=sorted(folders),
            state=state,
        )
    stored = sorted({account.renamed_name(n) for n in found})
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


def _expunged_last(stream: list[DomainEvent]) -> bool:
    """The stream's end is a deletion as expunged, and retention never expired it."""
    if any(isinstance(e, MessageExpired) for e in stream):
        return False
    deletions = [e for e in stream if isinstance(e, MessageDeleted)]
    return bool(deletions) and deletions[-1].reason == "expunged"
