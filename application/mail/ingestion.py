"""Ingesting mail: the one application service that stores what a mailbox holds.

Every path goes through here: the reconciliation poll and the watch path store fetched
pages (``MailIngestion``), ``ingest-message`` stores one described message (``ingest``).

Storing pages, in order, each step only after the one before is durable:

    check each page's cursor (out of range: the page is refused, alone)
    -> the pages' inline bodies (of any accounts) as one blob pack      (_store_bodies)
    -> per message: its state (ok / malformed / too_large / rejected / deferred) and
       its values brought into range (what a server sent is data: out of range ->
       malformed), made into its event (``message_event``)              (_prepare)
    -> the twin rule: what is stored under another identity is not new (known_twins)
    -> the new events of all pages in one append                         (append_new)
    -> metadata first: deferred messages held, or completed when their body
       came again                                                         (metadata_first)
    -> every page's cursor and "synced" mark in one write.

Identity without OBJECTID: a message whose server gives it only a version-1 fingerprint
(``fp:``, Message-ID + Date + size) is stored under version 2 (``fp2:``, that plus a
digest of its bytes), so two different messages that agree on those three stay two.
Messages stored before version 2 keep their ids: a message whose version-1 twin is
stored already is a duplicate (one existence query for all the pages' twins), so a
UIDVALIDITY reset never ingests them again.

Exactly one ``MessageIngested`` per (account, provider id): the message's stream id is
derived from that pair, so the store's uniqueness decides between racing workers, never
a read-then-write check. When an append collides (another worker, or a UIDVALIDITY reset
re-delivering the mailbox), the messages already stored are filtered out and the rest
appended again. In a group (``store_apart``) a page that cannot be stored fails alone:
after a failed group write, each page is retried on its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

from application.context import Context
from application.errors import ConcurrencyConflict, StoreUnavailable
from application.mail.deferral import (
    Arrival,
    complete_found,
    hold_deferred,
    may_defer,
    stored_as_v2,
    twin_rows,
)
from application.mail.flag_mirror import remember_uids
from application.mail.incoming import MAX_SIZE_BYTES, IncomingMessage, check_cursor
from application.mail.message_event import prepare
from application.mail.parsing import MimeParser, ParsedMessage, in_date_range
from application.mail.ports import BlobOwner, FetchBatch, FetchedMessage, MailboxCursor
from application.privacy import KeyErased
from domain.mail_account import MailAccount
from domain.message import (
    FINGERPRINT_V1,
    Direction,
    MessageIngested,
    MessageState,
    content_fingerprint,
)
from domain.message_flags import bounded_flags

log = logging.getLogger("tidings.ingestion")

FILTER_ATTEMPTS = 5


@dataclass(frozen=True)
class IngestOutcome:
    message_id: UUID
    duplicate: bool


@dataclass(frozen=True)
class Page:
    """One page fetched and parsed: what ``MailIngestion.store`` stores."""

    account: MailAccount
    messages: list[tuple[FetchedMessage, ParsedMessage]]
    cursor: MailboxCursor  # saved once the page is ingested
    has_more: bool
    folder: str = "INBOX"
    folder_key: str | None = None
    """None: INBOX, whose cursor is the account's (``mailbox_state``); else the folder's
    key in ``mail_folders``, whose cursor the folder pass saves after the page."""
    sent_folder: bool = False  # a \\Sent folder: every message in it is outbound


@dataclass(frozen=True)
class PageStored:
    ingested: int = 0
    duplicates: int = 0
    erased: bool = False  # the account was deleted (its key shredded) meanwhile
    completed: int = 0  # deferred messages of its account that came again with their body


# -- the service -------------------------------------------------------------------------


class MailIngestion:
    """Parse fetched pages (``parse_concurrency`` at a time, never raising) and store them.

    Thread-safe: the poll's pool threads and the watch path's committer share one."""

    def __init__(self, ctx: Context, parser: MimeParser, *, parse_concurrency: int = 4) -> None:
        self.ctx = ctx
        self.parser = parser
        self._parse_slots = threading.BoundedSemaphore(parse_concurrency)

    def read_page(self, account: MailAccount, batch: FetchBatch) -> Page:
        parsed = [(fetched, self._parse(fetched)) for fetched in batch.messages]
        return Page(account, parsed, batch.new_cursor, batch.has_more)

    def store(self, pages: Sequence[Page]) -> list[PageStored]:
        """Store pages of any accounts together (raises ``PageRefused`` for a page out of
        range, ``StoreUnavailable``, ``ConcurrencyConflict``)."""
        for page in pages:
            check_cursor(page.cursor)
        now = self.ctx.clock.now()
        body_refs, erased = self._store_bodies(pages)
        prepared, arrivals = self._prepare(pages, body_refs, erased, now)
        known = known_twins(self.ctx, arrivals)
        stored = append_new(
            self.ctx,
            [e for events in prepared if events for e in events if known.is_new(e.originator_id)],
        )
        completed = metadata_first(self.ctx, arrivals, known, now)
        remember_uids(self.ctx, arrivals, stored)
        self._save_cursors(pages, prepared, now)
        return [
            _stored(page, events, stored, completed)
            for page, events in zip(pages, prepared, strict=True)
        ]

    def _store_bodies(self, pages: Sequence[Page]) -> tuple[list[list[str | None]], set[str]]:
        """The pages' inline bodies as one blob pack: each message's body ref (a streamed
        body's own), per page; and the accounts whose key was gone (erased)."""
        bodies = [
            (BlobOwner(page.account.tenant_id, str(page.account.id)), fetched.raw)
            for page in pages
            for fetched, _ in page.messages
            if fetched.raw is not None
        ]
        stored = self.ctx.mail.blobs.put_packed(bodies) if bodies else []
        erased = {o.account_id for (o, _), ref in zip(bodies, stored, strict=True) if not ref}
        refs = iter(stored)
        body_refs = [
            [
                next(refs) if fetched.raw is not None else fetched.blob_ref
                for fetched, _ in p.messages
            ]
            for p in pages
        ]
        return body_refs, erased

    def _prepare(
        self,
        pages: Sequence[Page],
        body_refs: Sequence[Sequence[str | None]],
        erased: set[str],
        now: datetime,
    ) -> tuple[list[list[MessageIngested] | None], list[Arrival]]:
        """Per page, its events (None: its account was erased); and every message of the
        pages not erased, as fetched and as stored."""
        prepared: list[list[MessageIngested] | None] = []
        arrivals: list[Arrival] = []
        for page, refs in zip(pages, body_refs, strict=True):
            try:
                if str(page.account.id) in erased:
                    raise KeyErased(str(page.account.id))
                placed = placement(self.ctx, page)
                incoming = [
                    placed(self.incoming(page.account, fetched, parsed, ref))
                    for (fetched, parsed), ref in zip(page.messages, refs, strict=True)
                ]
                prepared.append(prepare(self.ctx, page.account, incoming, now))
                arrivals += [
                    Arrival(page.account, page.cursor, fetched, message)
                    for (fetched, _), message in zip(page.messages, incoming, strict=True)
                ]
            except KeyErased:
                log.info("ingestion.account_erased account_id=%s", page.account.id)
                prepared.append(None)
        return prepared, arrivals

    def _save_cursors(
        self,
        pages: Sequence[Page],
        prepared: Sequence[Sequence[MessageIngested] | None],
        now: datetime,
    ) -> None:
        """Every stored INBOX page's cursor and "synced" mark in one write (not an erased
        one's; another folder's page is the folder pass's to record)."""
        self.ctx.mail.state.record_synced(
            {
                str(page.account.id): page.cursor
                for page, events in zip(pages, prepared, strict=True)
                if events is not None and page.folder_key is None
            },
            now,
        )

    def store_apart(self, pages: Sequence[Page]) -> list[PageStored | Exception]:
        """``store`` for a group commit, never raising: when the group cannot be stored,
        each page is retried on its own, so one bad page fails alone (its exception)."""
        try:
            return list(self.store(pages))
        except StoreUnavailable as error:  # the store is away: one by one cannot help
            return [error for _ in pages]
        except Exception as error:  # whatever it is, it must not spread
            if len(pages) == 1:
                return [error]
            log.warning(
                "ingestion.group_failed pages=%d error=%s: storing each page alone",
                len(pages),
                type(error).__name__,
            )
        results: list[PageStored | Exception] = []
        for page in pages:
            try:
                [result] = self.store([page])
            except Exception as error:  # this page's failure, not the group's
                results.append(error)
            else:
                results.append(result)
        return results

    def incoming(
        self,
        account: MailAccount,
        fetched: FetchedMessage,
        parsed: ParsedMessage,
        body_ref: str | None,
    ) -> IncomingMessage:
        """The message as stored: its values from server and parser (a server's value out
        of range is a defect), and its state decided."""
        ref = fetched.ref
        defects = list(parsed.defects)
        size = ref.size
        if not (isinstance(size, int) and 0 <= size <= MAX_SIZE_BYTES):
            size = len(fetched.raw) if fetched.raw is not None else 0
            defects.append("SizeOutOfRange")
        received = ref.internal_date
        if received is not None and not in_date_range(received):
            received = None
            defects.append("InternalDateOutOfRange")
        if received is None and parsed.date is not None and in_date_range(parsed.date):
            received = parsed.date
        state: MessageState = "ok"
        if fetched.state == "deferred":  # metadata first: the body decides later
            state = "deferred"
        elif fetched.state == "too_large":
            state = "too_large"
        elif account.trusted_authserv_id and self.parser.dmarc_failed(
            parsed, account.trusted_authserv_id
        ):
            state = "rejected"
        elif defects:
            state = "malformed"
        provider_id = ref.provider_message_id
        body_sha256 = fetched.body_sha256()
        if provider_id.startswith(FINGERPRINT_V1) and body_sha256 is not None:
            provider_id = content_fingerprint(provider_id, body_sha256)
        return IncomingMessage(
            provider_message_id=provider_id,
            received_at=received or self.ctx.clock.now(),
            size_bytes=size,
            state=state,
            message_id_header=parsed.message_id,
            references=parsed.references or ((parsed.in_reply_to,) if parsed.in_reply_to else ()),
            sender=parsed.sender,
            to=parsed.to,
            cc=parsed.cc,
            subject=parsed.subject,
            snippet=parsed.snippet,
            body_ref=body_ref,
            defects=tuple(defects),
            flags=bounded_flags(ref.flags).flags,
        )

    def read_bodies(
        self, account: MailAccount, fetched: Sequence[FetchedMessage]
    ) -> list[IncomingMessage]:
        """Deferred messages' bodies as stored (``completion.Reader``): the inline ones as
        one blob pack, each parsed and its state decided (raises ``KeyErased``)."""
        owner = BlobOwner(account.tenant_id, str(account.id))
        inline = [m for m in fetched if m.raw is not None]
        packed = [(owner, m.raw or b"") for m in inline]
        refs = self.ctx.mail.blobs.put_packed(packed) if packed else []
        if any(ref is None for ref in refs):
            raise KeyErased(str(account.id))
        ref_of = {m.uid: ref for m, ref in zip(inline, refs, strict=True)}
        return [
            self.incoming(account, m, self._parse(m), ref_of.get(m.uid, m.blob_ref))
            for m in fetched
        ]

    def _parse(self, fetched: FetchedMessage) -> ParsedMessage:
        with self._parse_slots:
            try:
                if fetched.raw is not None:
                    return self.parser.parse_bytes(fetched.raw)
                if fetched.blob_ref is not None:
                    return self.parser.parse_blob(fetched.blob_ref)
                if fetched.header is not None:  # a deferred message: what its header says
                    return self.parser.parse_bytes(fetched.header)
            except Exception as error:  # a message that cannot be read is malformed
                log.warning(
                    "ingestion.parse_failed uid=%s error=%s",
                    fetched.uid,
                    type(error).__name__,
                )
                return ParsedMessage(defects=(f"ParserFailure:{type(error).__name__}",))
        return ParsedMessage()


def placement(ctx: Context, page: Page) -> Callable[[IncomingMessage], IncomingMessage]:
    """Where a page's messages were found and which way they went: ``outbound`` when the
    page is of a \\Sent folder or the From is the account's own address (revealed once
    per page: events hold it sealed), else ``inbound``. The address only steers how the
    page is sealed, so it is revealed with the key as the sealer holds it: no key read
    from the database per page (a burst's every page is another account's)."""
    account = page.account
    own = (
        ctx.mail.cipher.reveal(account.address, account.tenant_id, str(account.id), sealing=True)
        if account.address
        else None
    )
    own_address = own.strip().lower() if own else None

    def placed(message: IncomingMessage) -> IncomingMessage:
        mine = own_address is not None and any(
            a.address.strip().lower() == own_address for a in message.sender
        )
        direction: Direction = "outbound" if page.sent_folder or mine else "inbound"
        if message.folder == page.folder and message.direction == direction:
            return message  # an INBOX page's inbound mail, most of a burst: no copy
        return replace(message, folder=page.folder, direction=direction)

    return placed


# -- one message ---------------------------------------------------------------------------


def ingest(
    ctx: Context, account: MailAccount, messages: Sequence[IncomingMessage]
) -> list[IngestOutcome]:
    """Store described messages (``ingest-message``): the same checks and events as pages."""
    events = prepare(ctx, account, messages, ctx.clock.now())
    return outcomes(events, append_new(ctx, events))


def append_new(ctx: Context, events: Sequence[MessageIngested]) -> set[UUID]:
    """Append in one write what is not stored yet (events of any accounts); the ids
    this call stored. On a collision the stored ones are filtered out and the rest
    appended again."""
    pending = list(events)
    for _ in range(FILTER_ATTEMPTS):
        if not pending:
            return set()
        try:
            ctx.store.append(pending)
        except ConcurrencyConflict:
            taken = ctx.store.existing(e.originator_id for e in pending)
            pending = [e for e in pending if e.originator_id not in taken]
            continue
        return {e.originator_id for e in pending}
    raise ConcurrencyConflict("messages kept colliding; the next poll retries")


def outcomes(events: Sequence[MessageIngested], stored: set[UUID]) -> list[IngestOutcome]:
    return [IngestOutcome(e.originator_id, e.originator_id not in stored) for e in events]


# -- the steps' rules ----------------------------------------------------------------------


@dataclass(frozen=True)
class KnownTwins:
    """The twin rule for a group of arrivals: a message stored before under another
    identity of the same bytes is not new."""

    twins: dict[UUID, UUID]  # a version-2 id -> its version-1 twin
    stored_v1: set[UUID]  # the version-1 twins stored already
    aliased: set[UUID]  # deferred version-1 ids whose message is stored under version 2

    def is_new(self, event_id: UUID) -> bool:
        return self.twins.get(event_id) not in self.stored_v1 and event_id not in self.aliased


def known_twins(ctx: Context, arrivals: Sequence[Arrival]) -> KnownTwins:
    """Messages stored before version 2 keep their ids: a message whose version-1 twin is
    stored already is a duplicate (one existence query for all the twins). A deferred
    message known only by its version-1 fingerprint may be stored under version 2
    already (its body came before a UIDVALIDITY reset): then it is not new either."""
    twins = {UUID(v2): UUID(v1) for _, v1, v2 in twin_rows(arrivals)}
    stored_v1 = ctx.store.existing(twins.values()) if twins else set()
    return KnownTwins(twins, stored_v1, stored_as_v2(ctx, arrivals))


def metadata_first(
    ctx: Context, arrivals: Sequence[Arrival], known: KnownTwins, now: datetime
) -> dict[str, int]:
    """After the append, before the cursors: the twins of accounts that may defer bodies
    remembered, deferred messages that came again with their body completed (how many,
    per account), and every deferred message held for its body. Only accounts whose host
    has a budget pay for the first two."""
    deferring = may_defer(ctx, arrivals)
    ctx.mail.deferred.pair(twin_rows(deferring))
    completed = complete_found(ctx, deferring, known.twins, now)
    hold_deferred(ctx, arrivals, known.aliased)
    return completed


def _stored(
    page: Page,
    events: Sequence[MessageIngested] | None,
    stored: set[UUID],
    completed: dict[str, int],
) -> PageStored:
    if events is None:
        return PageStored(erased=True)
    new = sum(e.originator_id in stored for e in events)
    done = completed.pop(str(page.account.id), 0)  # told once per account
    return PageStored(new, len(events) - new, completed=done)
