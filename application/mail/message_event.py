"""The event a stored message is made of: ``MessageIngested``, its personal values
sealed under the account's key (its snippet under its body's own key), its thread key
and its arrival time in one sortable shape. Pure but for the sealing (``ctx.mail.cipher``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from uuid import UUID

from application.context import Context
from application.mail.incoming import IncomingMessage, in_range
from application.mail.outbound.compose import outbound_id_of
from application.mail.parsing import Address
from domain.identity import stream_id
from domain.mail_account import MailAccount
from domain.message import MessageIngested, message_id


def prepare(
    ctx: Context, account: MailAccount, messages: Sequence[IncomingMessage], now: datetime
) -> list[MessageIngested]:
    """The events for one account's messages, each brought into range first; a batch
    naming a message twice keeps the first (raises ``KeyErased`` when the account's key
    is gone)."""
    events: dict[UUID, MessageIngested] = {}
    for message in messages:
        event = message_ingested(ctx, account, in_range(message, now), now)
        events.setdefault(event.originator_id, event)
    return list(events.values())


def message_ingested(
    ctx: Context, account: MailAccount, message: IncomingMessage, now: datetime
) -> MessageIngested:
    """The event of one message already in range."""
    tenant, account_id = account.tenant_id, str(account.id)
    seal = ctx.mail.cipher.sealer(tenant, account_id)
    seal_body = ctx.mail.cipher.body_sealer(tenant, account_id, message.body_ref)
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
        snippet=seal_body(message.snippet),
        received_at=utc_iso(message.received_at),
        body_ref=message.body_ref,
        size_bytes=message.size_bytes,
        folder=message.folder,
        state=message.state,
        defects=list(message.defects),
        extra={
            "direction": message.direction,
            **({"flags": list(message.flags)} if message.flags else {}),
            **_sent_by_us(message),
        },
    )


def _sent_by_us(message: IncomingMessage) -> dict[str, str]:
    """``outboundId``: the outbound message this one is the copy of, for a message of
    ours read back from Sent (its Message-ID names the record; the outbox's read model
    keeps the link only for a record of the same account)."""
    if message.direction != "outbound" or not message.message_id_header:
        return {}
    outbound = outbound_id_of(message.message_id_header)
    return {} if outbound is None else {"outboundId": outbound}


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
