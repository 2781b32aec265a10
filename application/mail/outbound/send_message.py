"""send-message: queue a message to send from one of the tenant's accounts.

The outbound id is uuid5(account, ``idempotencyKey``): the same key answers the same id
and queues nothing new, also when two requests race (the store's version check lets one
stream start; the other reads it). The same key with another payload is 409
``idempotency_key_reused`` (a keyed digest of the payload is kept to compare).

From is the account's address. A recipient is an address or ``Name <address>``
(``recipients``: the name is validated here and encoded when composing). Every value
that becomes a header (addresses, subject, file names, content types, the key) is
refused with CR or LF in it (400). The composed
message is at most ``max_send_bytes`` (413 ``message_too_large``); an account's provider
may cap the messages a day (429 ``send_limit``). ``inReplyTo`` names a message of this
account: In-Reply-To and References come from it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from application.context import Context
from application.errors import ConcurrencyConflict
from application.mail.access import parse_account_id
from application.mail.outbound.access import load_sendable
from application.mail.outbound.attachments import Resolved, discard_used, resolve_all
from application.mail.outbound.compose import (
    LINE_BREAKS,
    Draft,
    compose,
    new_message_id,
    rfc5322_date,
    valid_base64,
)
from application.mail.outbound.recipients import MAX_RECIPIENT, parse_mailbox
from application.payloads import Payload as Base
from application.result import Result, not_found
from application.signals import Signal
from application.streams import commit, load
from application.users import User
from domain.mail_account import MailAccount
from domain.message import MessageIngested
from domain.outbound import Outbound, OutboundQueued, outbound_id

NAME = "send-message"

MAX_RECIPIENTS = 100
MAX_ATTACHMENTS = 20
_NO_ID = ""  # the answered message has no Message-ID


def _one_line(value: str) -> str:
    if not LINE_BREAKS.isdisjoint(value):
        raise ValueError("CR and LF are not allowed in a header value")
    return value


def _base64(value: str) -> str:
    if not valid_base64(value):
        raise ValueError("not valid base64")
    return value


def _recipient(value: str) -> str:
    parse_mailbox(value)  # the reason it is refused, as the 400's detail
    return value


# ``addr``, ``Name <addr>`` or ``"Name" <addr>`` (``recipients``).
Address = Annotated[str, StringConstraints(max_length=MAX_RECIPIENT), AfterValidator(_recipient)]
HeaderText = Annotated[str, StringConstraints(max_length=998), AfterValidator(_one_line)]
Addresses = Annotated[list[Address], Field(max_length=MAX_RECIPIENTS)]


class AttachmentPayload(Base):
    """Inline (``contentBase64`` with a ``filename``) or uploaded first (``uploadId``:
    the upload's file name and type unless given here)."""

    filename: (
        Annotated[str, StringConstraints(min_length=1, max_length=255), AfterValidator(_one_line)]
        | None
    ) = None
    content_type: (
        Annotated[
            str, StringConstraints(max_length=255, pattern=r"^[A-Za-z0-9.+-]+/[A-Za-z0-9.+-]+$")
        ]
        | None
    ) = None
    content_base64: Annotated[str, AfterValidator(_base64)] | None = None
    upload_id: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AttachmentPayload:
        if (self.content_base64 is None) == (self.upload_id is None):
            raise ValueError("give contentBase64 or uploadId, not both")
        if self.content_base64 is not None and self.filename is None:
            raise ValueError("an inline attachment needs a filename")
        return self


class Payload(Base):
    account_id: str
    to: Addresses
    cc: Addresses = []
    bcc: Addresses = []
    subject: HeaderText
    text: str | None = None
    html: str | None = None
    attachments: Annotated[list[AttachmentPayload], Field(max_length=MAX_ATTACHMENTS)] = []
    in_reply_to: str | None = None
    idempotency_key: Annotated[
        str, StringConstraints(min_length=1, max_length=200), AfterValidator(_one_line)
    ]

    @model_validator(mode="after")
    def _recipients(self) -> Payload:
        count = len(self.to) + len(self.cc) + len(self.bcc)
        if count == 0:
            raise ValueError("give at least one recipient")
        if count > MAX_RECIPIENTS:
            raise ValueError(f"at most {MAX_RECIPIENTS} recipients in all")
        return self

    def digest_text(self) -> str:
        """The payload without its key, canonical: equal payloads digest equally."""
        return json.dumps(
            self.model_dump(mode="json", exclude={"idempotency_key"}),
            sort_keys=True,
            ensure_ascii=False,
        )


def _digest(ctx: Context, tenant: str, account_id: str, payload: Payload) -> str:
    """Keyed by the tenant's digest key: the stored digest tells nothing of the content."""
    text = f"{account_id}\x1f{payload.digest_text()}"
    return ctx.mail.cipher.digest(tenant, "outbound-payload", text)


def answer(outbound: Outbound, digest: str, *, replayed: bool) -> Result:
    assert outbound.queued is not None
    if outbound.queued.digest != digest:
        return Result.fail(
            "idempotency_key_reused",
            409,
            "this idempotencyKey was used for another message",
            outboundId=str(outbound.id),
        )
    data: dict[str, Any] = {"outboundId": str(outbound.id), "state": outbound.state}
    if replayed:
        data["replayed"] = True
    return Result.ok(data)


def handle(payload: Payload, user: User, ctx: Context) -> Result:  # noqa: PLR0911, C901 - a list of refusals
    account = load_sendable(ctx, user, payload.account_id)
    if isinstance(account, Result):
        return account
    tenant, account_id = account.tenant_id, str(account.id)
    stream = outbound_id(account_id, payload.idempotency_key)
    digest = _digest(ctx, tenant, account_id, payload)
    existing = load(ctx.store, Outbound, stream)
    if existing.exists:
        return answer(existing, digest, replayed=True)
    if not account.smtp:
        return Result.fail(
            "smtp_not_configured", 422, "the account has no smtp settings to send with"
        )
    sender = ctx.mail.cipher.reveal(account.address, tenant, account_id)
    if sender is None:
        return not_found(f"mail account {payload.account_id}")
    references = _thread(ctx, account, payload.in_reply_to)
    if isinstance(references, Result):
        return references
    if (limited := _send_limit(ctx, account)) is not None:
        return limited
    attachments = _attachments(ctx, tenant, account_id, payload)
    if isinstance(attachments, Result):  # a racing request may have queued it, uploads used
        again = load(ctx.store, Outbound, stream)
        return answer(again, digest, replayed=True) if again.exists else attachments
    now = ctx.clock.now()
    draft = Draft(
        sender=sender,
        to=tuple(parse_mailbox(r) for r in payload.to),
        cc=tuple(parse_mailbox(r) for r in payload.cc),
        bcc=tuple(parse_mailbox(r) for r in payload.bcc),
        subject=payload.subject,
        text=payload.text,
        html=payload.html,
        attachments=tuple(a for a, _ in attachments),
        in_reply_to=references[-1] if references and references[-1] != _NO_ID else None,
        references=tuple(r for r in references if r != _NO_ID),
        message_id=new_message_id(str(stream), sender),
        date=rfc5322_date(now),
    )
    try:
        message = compose(draft, with_bcc=True)
    except (ValueError, TypeError) as error:  # the email package's own header checks
        return Result.fail("invalid_payload", 400, f"the message cannot be composed: {error}")
    size = len(message)
    if size > ctx.policy.max_send_bytes:
        return Result.fail(
            "message_too_large",
            413,
            f"the message is {size} bytes; at most {ctx.policy.max_send_bytes}",
            sizeBytes=size,
            limitBytes=ctx.policy.max_send_bytes,
        )
    seal = ctx.mail.cipher.sealer(tenant, account_id)
    outbound = Outbound(stream)
    outbound.queue(
        OutboundQueued(
            originator_id=stream,
            originator_version=1,
            timestamp=now,
            tenant_id=tenant,
            account_id=account_id,
            queued_by=user.id,
            digest=digest,
            message_id_header=seal(draft.message_id),
            envelope=seal(json.dumps(draft.envelope_json(), ensure_ascii=False)),
            subject=seal(draft.subject),
            content=seal(message.decode("latin-1")),  # 7-bit bytes, kept exactly
            recipients=len(draft.recipients),
            size_bytes=size,
        )
    )
    try:
        commit(ctx.store, outbound)
    except ConcurrencyConflict:  # a racing request with the same key queued it first
        return answer(load(ctx.store, Outbound, stream), digest, replayed=True)
    ctx.mail.signals.publish(  # a worker attempts it now, not at its next scan
        Signal("outbound_queued", tenant, account_id=account_id, outbound_id=str(stream))
    )
    discard_used(ctx, [record for _, record in attachments if record is not None])
    return Result.ok({"outboundId": str(stream), "state": "queued"})


def _thread(ctx: Context, account: MailAccount, message_id: str | None) -> list[str] | Result:
    """References for a reply to ``message_id`` (the stored message's own, then its
    Message-ID); 404 for a message that is not this account's."""
    if message_id is None:
        return []
    stream = parse_account_id(message_id)
    events = ctx.store.load(stream) if stream is not None else []
    first = events[0] if events else None
    if not isinstance(first, MessageIngested) or first.account_id != str(account.id):
        return not_found(f"message {message_id}")
    reveal = ctx.mail.cipher.reveal
    own = reveal(first.message_id_header, account.tenant_id, first.account_id) or ""
    try:
        earlier = json.loads(reveal(first.references, account.tenant_id, first.account_id) or "[]")
    except ValueError:
        earlier = []
    chain = [str(r) for r in earlier if isinstance(r, str) and LINE_BREAKS.isdisjoint(r)]
    # The last is the message answered (In-Reply-To); one without a Message-ID of its
    # own still gives its ancestors to References, and no In-Reply-To.
    chain.append(own if own and LINE_BREAKS.isdisjoint(own) else _NO_ID)
    return chain[-50:]  # a bounded chain: the oldest ancestors go first


def _send_limit(ctx: Context, account: MailAccount) -> Result | None:
    limit = ctx.mail.providers.match(account.imap.get("host", "")).daily_send_limit
    outbox = ctx.mail.outbox
    if limit is None or outbox is None:
        return None
    now = ctx.clock.now().astimezone(UTC)
    day = datetime(now.year, now.month, now.day, tzinfo=UTC)
    if outbox.queued_since(str(account.id), day.isoformat()) < limit:
        return None
    return Result.fail(
        "send_limit",
        429,
        f"the account's provider allows {limit} messages a day",
        limit=limit,
        retryAfterSeconds=int((day + timedelta(days=1) - now).total_seconds()) + 1,
    )


def _attachments(ctx: Context, tenant: str, account_id: str, payload: Payload) -> Resolved | Result:
    return resolve_all(
        ctx,
        tenant,
        account_id,
        [(a.filename, a.content_type, a.content_base64, a.upload_id) for a in payload.attachments],
    )
