"""Completing deferred messages: their bodies, fetched once the download budget allows,
become each stream's second event (``MessageBodyFetched``), or ``MessageBodyVanished``
when the server no longer has the message.

One pass over an account (``BodyCompletion.run``, after its pages are synced):

    the account's entries (``DeferredBodies``), oldest place first
    -> only those whose stream is still a deferred message (else: dropped)
    -> per folder, INBOX first, each by its own cursor (entries of a folder no longer
       synced -> vanished, ``folder_gone``; of a folder not read yet: they wait):
    -> entries of an earlier UIDVALIDITY: the folder was read again since the reset
       (the cursor's backfill is done) and did not find them again -> vanished
    -> the others' bodies by UID from their folder (``fetch_deferred``), while the
       budget allows
    -> per message: its body stored (one blob pack), parsed, its state decided as for
       any message; UIDs the server no longer has -> vanished
    -> the second events appended at version 2 (a racing worker's win is a conflict,
       absorbed), then their entries dropped
    until nothing is left, the budget stops it, or a round makes no progress.

A message that comes again with its body through the ordinary pages (after a
UIDVALIDITY reset re-reads the mailbox) is completed there (``complete_found``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import cast
from uuid import UUID

from application.context import Context
from application.errors import ConcurrencyConflict
from application.mail.deferred import DeferredBody
from application.mail.incoming import IncomingMessage, in_range
from application.mail.ports import FetchedMessage, MailboxCursor, MailboxSession
from application.privacy import KeyErased
from domain.events import DomainEvent
from domain.mail_account import MailAccount
from domain.message import (
    BODY_VERSION,
    FinalState,
    MessageBodyFetched,
    MessageBodyVanished,
    MessageIngested,
    message_id,
)

log = logging.getLogger("tidings.completion")

# Reads a fetched body: (the message as stored from it, or raises ``KeyErased``).
Reader = Callable[[MailAccount, Sequence[FetchedMessage]], list[IncomingMessage]]


def still_deferred(ctx: Context, stream_ids: Iterable[UUID]) -> set[UUID]:
    """The streams whose only event is a ``deferred`` ``MessageIngested`` (the store's
    word, not the read model's)."""
    live: set[UUID] = set()
    for stream_id, events in ctx.store.load_many(stream_ids).items():  # one round trip
        first = events[0] if len(events) == 1 else None
        if isinstance(first, MessageIngested) and first.state == "deferred":
            live.add(stream_id)
    return live


def body_fetched(
    ctx: Context, account: MailAccount, stream_id: UUID, message: IncomingMessage, now: datetime
) -> MessageBodyFetched:
    message = in_range(message, now)
    seal = ctx.mail.cipher.body_sealer(account.tenant_id, str(account.id), message.body_ref)
    return MessageBodyFetched(
        originator_id=stream_id,
        originator_version=BODY_VERSION,
        timestamp=now,
        tenant_id=account.tenant_id,
        account_id=str(account.id),
        snippet=seal(message.snippet),
        body_ref=message.body_ref,
        size_bytes=message.size_bytes,
        state=cast(FinalState, message.state),  # a fetched body decides a final state
        defects=list(message.defects),
    )


def body_vanished(
    account: MailAccount, stream_id: UUID, reason: str, now: datetime
) -> MessageBodyVanished:
    return MessageBodyVanished(
        originator_id=stream_id,
        originator_version=BODY_VERSION,
        timestamp=now,
        tenant_id=account.tenant_id,
        account_id=str(account.id),
        reason=reason,
    )


def append_second(ctx: Context, events: Sequence[DomainEvent]) -> set[UUID]:
    """Append version-2 events in one write; on a collision (another worker completed
    some meanwhile) one by one, passing over the taken ones. The streams completed here."""
    if not events:
        return set()
    try:
        ctx.store.append(events)
    except ConcurrencyConflict:
        stored: set[UUID] = set()
        for event in events:
            try:
                ctx.store.append([event])
            except ConcurrencyConflict:
                continue
            stored.add(event.originator_id)
        return stored
    return {event.originator_id for event in events}


class BodyCompletion:
    def __init__(self, ctx: Context, read: Reader) -> None:
        self.ctx = ctx
        self.read = read

    def run(
        self,
        session: MailboxSession,
        account: MailAccount,
        limit: int,
        on_time: Callable[[], None] = lambda: None,
    ) -> int:
        """Complete what the budget allows of the account's deferred messages; how many
        were completed (``on_time`` raises once the pass's deadline passed)."""
        account_id = str(account.id)
        completed = 0
        while True:
            on_time()
            due = self._live(self.ctx.mail.deferred.due(account_id, limit))
            cursors = self._cursors(account_id, {d.folder for d in due})
            progress = 0
            for folder in sorted({d.folder for d in due}, key=lambda f: (f != "INBOX", f)):
                entries = [d for d in due if d.folder == folder]
                if folder not in cursors:  # not synced now: its place is lost
                    progress += self._vanish(account, entries, "folder_gone")
                    continue
                cursor = cursors[folder]
                if cursor is None:  # not read yet: its entries wait
                    continue
                stale = [d for d in entries if d.uidvalidity != cursor.uidvalidity]
                if stale and cursor.backfill_until is None:
                    progress += self._vanish(account, stale, "uidvalidity_changed")
                here = [d for d in entries if d.uidvalidity == cursor.uidvalidity]
                if here:
                    progress += self._fetch(session, account, here, folder)
            completed += progress
            if not progress:  # the budget is spent, or nothing could be done: next time
                return completed

    def _cursors(self, account_id: str, folders: set[str]) -> dict[str, MailboxCursor | None]:
        """The cursor of each synced folder among ``folders`` (INBOX's is the account's;
        a folder without a row is not synced now and has no entry here)."""
        found: dict[str, MailboxCursor | None] = {}
        if "INBOX" in folders:
            found["INBOX"] = self.ctx.mail.state.cursor(account_id)
        if folders - {"INBOX"} and self.ctx.mail.folders is not None:
            rows = self.ctx.mail.folders.folders(account_id)
            found.update((r.name, r.cursor) for r in rows if r.name in folders)
        return found

    def _live(self, due: list[DeferredBody]) -> list[DeferredBody]:
        """The entries whose stream is still deferred; the others are dropped."""
        live = still_deferred(self.ctx, (UUID(d.message_id) for d in due))
        self.ctx.mail.deferred.drop(d.message_id for d in due if UUID(d.message_id) not in live)
        return [d for d in due if UUID(d.message_id) in live]

    def _fetch(
        self, session: MailboxSession, account: MailAccount, due: list[DeferredBody], folder: str
    ) -> int:
        account_id = str(account.id)
        by_uid = {d.uid: d for d in due}
        fetch = session.fetch_deferred(
            sorted(by_uid), uidvalidity=due[0].uidvalidity, folder=folder
        )
        if fetch.uidvalidity != due[0].uidvalidity:  # reset meanwhile: the next pass sees it
            return 0
        now = self.ctx.clock.now()
        gone = [by_uid[uid] for uid in fetch.gone if uid in by_uid]
        found = [m for m in fetch.messages if m.uid in by_uid]
        # A UID that now holds another message (a server reusing UIDs): the one we want is gone.
        moved = [
            m
            for m in found
            if str(message_id(account_id, m.ref.provider_message_id)) != by_uid[m.uid].message_id
        ]
        gone += [by_uid[m.uid] for m in moved]
        found = [m for m in found if m not in moved]
        try:
            incoming = self.read(account, found)
            events: list[DomainEvent] = [
                body_fetched(self.ctx, account, UUID(by_uid[m.uid].message_id), message, now)
                for m, message in zip(found, incoming, strict=True)
            ]
        except KeyErased:  # the account's key is gone: nothing can be completed
            self.ctx.mail.deferred.forget_account(account_id)
            return 0
        events += [body_vanished(account, UUID(d.message_id), "expunged", now) for d in gone]
        append_second(self.ctx, events)
        finished = [by_uid[m.uid].message_id for m in found] + [d.message_id for d in gone]
        self.ctx.mail.deferred.drop(finished)
        if events:
            log.info(
                "completion.bodies account_id=%s fetched=%d vanished=%d",
                account_id,
                len(found),
                len(gone),
            )
        return len(events)

    def _vanish(self, account: MailAccount, stale: list[DeferredBody], reason: str) -> int:
        now = self.ctx.clock.now()
        events = [body_vanished(account, UUID(d.message_id), reason, now) for d in stale]
        append_second(self.ctx, events)
        self.ctx.mail.deferred.drop(d.message_id for d in stale)
        log.info(
            "completion.vanished account_id=%s messages=%d reason=%s",
            account.id,
            len(stale),
            reason,
        )
        return len(events)
