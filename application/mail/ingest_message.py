"""ingest-message: record one described inbound message (SystemAdmin: operators, imports
and tests; the workers store fetched pages through ``AccountSync`` instead)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from application.context import Context
from application.mail.access import parse_account_id
from application.mail.incoming import MAX_SIZE_BYTES, IncomingMessage
from application.mail.ingestion import ingest
from application.mail.parsing import Address, in_date_range
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.streams import load
from application.users import SYSTEM_ADMIN, User
from domain.mail_account import MailAccount
from domain.message import FinalState

NAME = "ingest-message"


def _unicode(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("lone surrogates are not allowed") from None
    return value


def _in_range(moment: datetime) -> datetime:
    if not in_date_range(moment):
        raise ValueError("must lie within 1970-2200 (UTC), with an offset within ±14 hours")
    return moment


Short = Annotated[str, StringConstraints(max_length=998), AfterValidator(_unicode)]


class AddressPayload(Base):
    name: Short = ""
    address: Short


class Payload(Base):
    account_id: str
    provider_message_id: Annotated[
        str, StringConstraints(min_length=1, max_length=512), AfterValidator(_unicode)
    ]
    message_id_header: Short | None = None
    references: list[Short] = Field(default_factory=list, max_length=1_000)
    from_: list[AddressPayload] = Field(default_factory=list, alias="from", max_length=1_000)
    to: list[AddressPayload] = Field(default_factory=list, max_length=1_000)
    cc: list[AddressPayload] = Field(default_factory=list, max_length=1_000)
    subject: Annotated[str, StringConstraints(max_length=10_000), AfterValidator(_unicode)] = ""
    snippet: Annotated[str, StringConstraints(max_length=2_000), AfterValidator(_unicode)] = ""
    received_at: Annotated[datetime, Field(strict=False), AfterValidator(_in_range)]  # ISO 8601
    body_ref: Annotated[str, StringConstraints(max_length=200), AfterValidator(_unicode)] | None = (
        None
    )
    size_bytes: Annotated[int, Field(ge=0, le=MAX_SIZE_BYTES)]
    folder: Short = "INBOX"
    state: FinalState = "ok"
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
