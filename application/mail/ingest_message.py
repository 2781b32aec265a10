"""ingest-message: record one inbound message (SystemAdmin: workers and operators)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints

from application.context import Context
from application.mail.access import parse_account_id
from application.mail.ingestion import IncomingMessage, ingest
from application.mail.parsing import Address
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.streams import load
from application.users import SYSTEM_ADMIN, User
from domain.mail_account import MailAccount
from domain.message import MessageState

NAME = "ingest-message"

Short = Annotated[str, StringConstraints(max_length=998)]


class AddressPayload(Base):
    name: Short = ""
    address: Short


class Payload(Base):
    account_id: str
    provider_message_id: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    message_id_header: Short | None = None
    references: list[Short] = Field(default_factory=list)
    from_: list[AddressPayload] = Field(default_factory=list, alias="from")
    to: list[AddressPayload] = Field(default_factory=list)
    cc: list[AddressPayload] = Field(default_factory=list)
    subject: Annotated[str, StringConstraints(max_length=10_000)] = ""
    snippet: Annotated[str, StringConstraints(max_length=2_000)] = ""
    received_at: Annotated[datetime, Field(strict=False)]  # ISO 8601 text on the wire
    body_ref: Annotated[str, StringConstraints(max_length=200)] | None = None
    size_bytes: Annotated[int, Field(ge=0)]
    folder: Short = "INBOX"
    state: MessageState = "ok"
    thread_id: Short | None = None


def _addresses(items: list[AddressPayload]) -> tuple[Address, ...]:
    return tuple(Address(i.name, i.address) for i in items)


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if SYSTEM_ADMIN not in user.roles:
        return forbidden()
    stream = parse_account_id(payload.account_id)
    account = None if stream is None else load(ctx.store, MailAccount, stream)
    if account is None or not account.exists:
        return not_found(f"mail account {payload.account_id}")
    if account.status == "disconnected":
        return Result.fail("account_disconnected", 422, "the account is disconnected")
    message = IncomingMessage(
        provider_message_id=payload.provider_message_id,
        received_at=payload.received_at,
        size_bytes=payload.size_bytes,
        state=payload.state,
        message_id_header=payload.message_id_header,
        references=tuple(payload.references),
        sender=_addresses(payload.from_),
        to=_addresses(payload.to),
        cc=_addresses(payload.cc),
        subject=payload.subject,
        snippet=payload.snippet,
        body_ref=payload.body_ref,
        folder=payload.folder,
        provider_thread_id=payload.thread_id,
    )
    [outcome] = ingest(ctx, account, [message])
    return Result.ok({"messageId": str(outcome.message_id), "duplicate": outcome.duplicate})
