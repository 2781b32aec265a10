"""Mirroring a folder's flags into the message streams (``FlagMirror``), and the UID map
rows a stored page leaves (``remember_uids``).

One pass (``mirror``), on a logged-in session after the poll's arrivals:

    the folder's flag cursor -> the session reads flags (``FlagReader``: unchanged,
    CHANGEDSINCE, everything once, or the window) -> UIDs whose flags differ from the UID
    map's -> their streams loaded -> a ``MessageFlagsChanged`` for each stream whose stored
    set differs -> appended in one write -> the cursor and the map saved together.

One pass at a time per folder: a pass claims (account, folder) in the flag state first
(``FlagStateStore.claim``, a token with an expiry) and a racing poller that finds it
claimed skips its flag step (``busy``), so two readings of different moments never
race to write their views. Exactly once beneath that: an event is appended at the
version after the one read, so writers collide in the store. The loser leaves the
streams the winner wrote to the next poll (the winner's view may be the newer one),
does not move its cursor's modseq past them, and writes the rest. A restart re-reads
from the saved cursor and compares the same way. A server that answers every message
every time costs bytes and comparisons, never events.

A stream still ``deferred`` (its version 2 belongs to its body) is held the same way: no
event, the map keeps the old flags and the cursor's modseq does not move, so the change
is read again on the next poll. UIDs not in the map (stored before it existed, or by another
path) are counted as ``unmapped``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID, uuid4

from application.context import Context
from application.errors import ConcurrencyConflict
from application.mail.deferral import Arrival
from application.mail.flag_state import (
    INBOX,
    FlagCursor,
    FlagRead,
    FlagReader,
    FlagStateStore,
    FlagWindow,
    UidEntry,
)
from application.mail.folder_seen import FolderSeen
from application.mail.resync import Resynced
from domain.events import DomainEvent
from domain.mail_account import MailAccount
from domain.message import MessageFlagsChanged, awaiting_body, stored_flags
from domain.message_flags import FLAGGED, SEEN

log = logging.getLogger("tidings.flags")

ATTEMPTS = 5
# How long one pass holds its folder's claim at most (a crashed holder's claim lapses):
# well past the poll's deadline (120 s), so a live pass never loses it.
CLAIM_SECONDS = 600.0


@dataclass(frozen=True)
class FlagsMirrored:
    changed: int = 0  # events appended
    fetched: int = 0  # messages the server answered for
    held: int = 0  # left for the next poll: deferred, or written by a racing poller
    unmapped: int = 0  # UIDs the map does not know
    dropped: int = 0  # flags left out by the bounds
    mode: str = "off"


class FlagMirror:
    """Thread-safe (no state of its own): the poll's pool threads share one."""

    def __init__(
        self,
        ctx: Context,
        store: FlagStateStore,
        window: FlagWindow,
        claim_seconds: float = CLAIM_SECONDS,
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.window = window
        self.claim_seconds = claim_seconds

    def mirror(
        self,
        session: object,
        account: MailAccount,
        folder: str = INBOX,
        known: FolderSeen | None = None,
        resynced: tuple[Resynced, int] | None = None,
    ) -> FlagsMirrored:
        """Mirror ``folder``'s flag changes (raises the session's ``MailProviderError``,
        ``StoreUnavailable``, ``ConcurrencyConflict`` after ``ATTEMPTS`` collisions).
        ``known``: the folder's counters of this poll, taken before anything of it was
        read (``folder_seen``); with CONDSTORE, a HIGHESTMODSEQ equal to the cursor's
        ends the pass without a command. ``resynced``: a QRESYNC EXAMINE's answer and
        the modseq it asked from, used instead of a FETCH where the cursor allows."""
        if not isinstance(session, FlagReader):
            return FlagsMirrored()
        account_id, token = str(account.id), uuid4().hex
        if known is not None and _unchanged(session, self.store.cursor(account_id, folder), known):
            return FlagsMirrored(mode="unchanged")
        now = self.ctx.clock.now().timestamp()
        if not self.store.claim(account_id, folder, token, now=now, until=now + self.claim_seconds):
            log.info("flags.busy account_id=%s", account_id)
            return FlagsMirrored(mode="busy")
        try:
            return self._mirror(session, account, folder, resynced)
        finally:
            self.store.release(account_id, folder, token)

    def _mirror(
        self,
        session: FlagReader,
        account: MailAccount,
        folder: str,
        resynced: tuple[Resynced, int] | None,
    ) -> FlagsMirrored:
        account_id = str(account.id)
        cursor = self.store.cursor(account_id, folder)
        read = _from_resync(cursor, resynced) if resynced is not None else None
        if read is None:
            read = session.read_flags(cursor, self.window, folder)
        if read.mode == "unchanged":
            return FlagsMirrored(mode=read.mode)
        known = self.store.known(account_id, folder, read.uidvalidity, read.flags)
        differing = {
            uid: entry for uid, entry in known.items() if entry.flags != read.flags[uid].flags
        }
        changed, held = self._append(
            account, {e.message_id: read.flags[u].flags for u, e in differing.items()}
        )
        mirrored = [
            UidEntry(
                e.account_id, e.folder, e.uidvalidity, uid, e.message_id, read.flags[uid].flags
            )
            for uid, e in differing.items()
            if e.message_id not in held
        ]
        self.store.save(account_id, folder, _next_cursor(cursor, read, bool(held)), mirrored)
        outcome = FlagsMirrored(
            changed=changed,
            fetched=len(read.flags),
            held=len(held),
            unmapped=len(read.flags) - len(known),
            dropped=read.dropped,
            mode=read.mode,
        )
        if read.stale_modseqs:
            log.warning("flags.condstore_unreliable account_id=%s", account_id)
        log.info(
            "flags.ok account_id=%s mode=%s fetched=%d changed=%d held=%d unmapped=%d dropped=%d",
            account_id,
            outcome.mode,
            outcome.fetched,
            outcome.changed,
            outcome.held,
            outcome.unmapped,
            outcome.dropped,
        )
        return outcome

    def _append(
        self, account: MailAccount, wanted: Mapping[UUID, tuple[str, ...]]
    ) -> tuple[int, set[UUID]]:
        """Append an event for each stream whose stored flags differ from ``wanted``: how
        many were appended, and the streams left for the next poll: held (deferred), or
        written by someone else since this pass read them (a racing poller: its view may
        be newer than ours, so ours is not written over it; the next poll reads again)."""
        left: set[UUID] = set()
        read_at: dict[UUID, int] = {}
        if not wanted:
            return 0, left
        for _ in range(ATTEMPTS):
            streams = self.ctx.store.load_many([i for i in wanted if i not in left])
            now = self.ctx.clock.now()
            for i, stream in streams.items():
                if awaiting_body(stream) or len(stream) != read_at.setdefault(i, len(stream)):
                    left.add(i)
            events = [
                _changed(account, i, stream, wanted[i], now)
                for i, stream in streams.items()
                if i not in left and stored_flags(stream) not in (None, wanted[i])
            ]
            if not events:
                return 0, left
            try:
                self.ctx.store.append(events)
            except ConcurrencyConflict:
                continue
            return len(events), left
        raise ConcurrencyConflict("flag changes kept colliding; the next poll retries")


def _changed(
    account: MailAccount,
    stream_id: UUID,
    stream: list[DomainEvent],
    flags: tuple[str, ...],
    now: datetime,
) -> MessageFlagsChanged:
    return MessageFlagsChanged(
        originator_id=stream_id,
        originator_version=len(stream) + 1,
        timestamp=now,
        tenant_id=account.tenant_id,
        account_id=str(account.id),
        flags=list(flags),
        unread=SEEN not in flags,
        flagged=FLAGGED in flags,
    )


def _from_resync(cursor: FlagCursor | None, resynced: tuple[Resynced, int]) -> FlagRead | None:
    """A QRESYNC answer as a CHANGEDSINCE read: only over a believed cursor of the same
    UIDVALIDITY whose modseq is at or above the one asked (else nothing changed below
    it would be missed)."""
    answer, asked = resynced
    status = answer.status
    if (
        cursor is None
        or cursor.unreliable
        or cursor.uidvalidity != status.uidvalidity
        or cursor.modseq is None
        or asked > cursor.modseq
        or status.highestmodseq is None
    ):
        return None
    return FlagRead(
        status.uidvalidity,
        status.highestmodseq,
        "changedsince",
        answer.flags,
        cursor.sweep_from,
        answer.stale_modseqs,
    )


def _unchanged(session: object, cursor: FlagCursor | None, known: FolderSeen) -> bool:
    """CONDSTORE says nothing changed since the cursor (a believed one, same UIDVALIDITY):
    every change after ``known`` was taken has a higher MODSEQ, read by a later poll."""
    return (
        "CONDSTORE" in getattr(session, "capabilities", frozenset())
        and cursor is not None
        and not cursor.unreliable
        and cursor.uidvalidity == known.uidvalidity
        and cursor.modseq is not None
        and cursor.modseq == known.highestmodseq
    )


def _next_cursor(cursor: FlagCursor | None, read: FlagRead, held: bool) -> FlagCursor:
    """The cursor after ``read``: its modseq unless a held stream must be read again."""
    same = cursor is not None and cursor.uidvalidity == read.uidvalidity
    modseq = read.highestmodseq
    if held:
        modseq = cursor.modseq if same and cursor is not None else None
    unreliable = read.stale_modseqs or (same and cursor is not None and cursor.unreliable)
    return FlagCursor(read.uidvalidity, modseq, read.sweep_from, unreliable)


def remember_uids(ctx: Context, arrivals: Sequence[Arrival], stored: set[UUID]) -> None:
    """The UID map rows of the arrivals of stored pages (a step of ``MailIngestion.store``,
    after its events and before its cursor). A message ``stored`` now arrived with the
    flags its event holds; one stored before (a UIDVALIDITY reset brought it again) holds
    flags the map does not know (None: the next mirror compares with its stream). Nothing
    without a flag store."""
    store = ctx.mail.flags
    if store is None or not arrivals:
        return
    store.remember(
        [
            UidEntry(
                str(a.account.id),
                a.message.folder,
                a.cursor.uidvalidity,
                a.fetched.uid,
                a.stream,
                a.message.flags if a.stream in stored else None,
            )
            for a in arrivals
        ]
    )
