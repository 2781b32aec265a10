"""Ingesting messages: exactly one ``MessageIngested`` per (account, provider id).

The message's stream id is derived from that pair, so the store's uniqueness decides
between racing workers, never a read-then-write check. A batch is appended in one
write; when it collides (another worker, or a UIDVALIDITY reset re-delivering the
mailbox), the messages already stored are filtered out and the rest appended again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from uuid import UUID

from application.context import Context
from application.errors import ConcurrencyConflict
from application.mail.parsing import Address
from domain.identity import stream_id
from domain.mail_account import MailAccount
from domain.message import MessageIngested, MessageState, message_id

FILTER_ATTEMPTS = 5


@dataclass(frozen=True)
class IncomingMessage:
    provider_message_id: str
    received_at: datetime
    size_bytes: int
    state: MessageState = "ok"
    message_id_header: str | None = None
    references: tuple[str, ...] = ()
    sender: tuple[Address, ...] = ()
    to: tuple[Address, ...] = ()
    cc: tuple[Address, ...] = ()
    subject: str = ""
    snippet: str = ""
    body_ref: str | None = None
    folder: str = "INBOX"
    provider_thread_id: str | None = None
    defects: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class IngestOutcome:
    message_id: UUID
    duplicate: bool


def thread_key(account_id: str, message: IncomingMessage) -> str:
    """The provider's thread id, else the first reference, else the Message-ID."""
    root = (
        message.provider_thread_id
        or (message.references[0] if message.references else None)
        or message.message_id_header
        or message.provider_message_id
    )
    return stream_id("thread", account_id, root).hex


def utc_iso(moment: datetime) -> str:
    """Sortable as text: always UTC, always the same shape."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _addresses(addresses: Sequence[Address]) -> str:
    return json.dumps(
        [{"name": a.name, "address": a.address} for a in addresses], ensure_ascii=False
    )


def build_event(
    ctx: Context, account: MailAccount, message: IncomingMessage, now: datetime
) -> MessageIngested:
    tenant, account_id = account.tenant_id, str(account.id)
    seal = ctx.mail.cipher.sealer(tenant, account_id)

    return MessageIngested(
        originator_id=message_id(account_id, message.provider_message_id),
        originator_version=1,
        timestamp=now,
        tenant_id=tenant,
        account_id=account_id,
        provider_message_id=message.provider_message_id,
        thread_key=thread_key(account_id, message),
        message_id_header=seal(message.message_id_header or ""),
        references=seal(json.dumps(list(message.references))),
        sender=seal(_addresses(message.sender)),
        to=seal(_addresses(message.to)),
        cc=seal(_addresses(message.cc)),
        subject=seal(message.subject),
        snippet=seal(message.snippet),
        received_at=utc_iso(message.received_at),
        body_ref=message.body_ref,
        size_bytes=message.size_bytes,
        folder=message.folder,
        state=message.state,
        defects=list(message.defects),
        extra={},
    )


def prepare(
    ctx: Context, account: MailAccount, messages: Sequence[IncomingMessage], now: datetime
) -> list[MessageIngested]:
    """The events for one account's messages; a batch naming a message twice keeps the
    first (raises ``KeyErased`` when the account's key is gone)."""
    events: dict[UUID, MessageIngested] = {}
    for message in messages:
        event = build_event(ctx, account, message, now)
        events.setdefault(event.originator_id, event)
    return list(events.values())


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
            pending = [e for e in pending if not ctx.store.load(e.originator_id)]
            continue
        return {e.originator_id for e in pending}
    raise ConcurrencyConflict("messages kept colliding; the next poll retries")


def outcomes(events: Sequence[MessageIngested], stored: set[UUID]) -> list[IngestOutcome]:
    return [IngestOutcome(e.originator_id, e.originator_id not in stored) for e in events]


def ingest(
    ctx: Context, account: MailAccount, messages: Sequence[IncomingMessage]
) -> list[IngestOutcome]:
    events = prepare(ctx, account, messages, ctx.clock.now())
    return outcomes(events, append_new(ctx, events))
