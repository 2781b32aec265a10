"""Inbound messages: one stream per (account, provider message id), opened by exactly one
``MessageIngested``. The stream id is derived from that pair, so two workers ingesting
the same message collide in the store and exactly one event survives.

``state``: ``ok``; ``malformed`` (recorded with what could be read); ``too_large``
(metadata only, body never fetched); ``rejected`` (DMARC failed per a trusted
Authentication-Results; recorded, not shown as mail); ``deferred`` (metadata first: the
account's daily download budget was spent, the body comes later). Personal fields
(addresses, subject, snippet) arrive encrypted.

A ``deferred`` message's stream takes exactly one second event, at version 2 (so racing
workers collide in the store and one survives): ``MessageBodyFetched`` (the body came;
its state is one of the four final ones) or ``MessageBodyVanished`` (the server no
longer has the message: state ``vanished``). Later events (mail retention's, in
``domain.message_retention``) come only after it, never in its place.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar, Literal
from uuid import UUID

from domain.events import DomainEvent
from domain.identity import stream_id

FinalState = Literal["ok", "malformed", "too_large", "rejected"]
MessageState = Literal["ok", "malformed", "too_large", "rejected", "deferred", "vanished"]
MESSAGE_STATES: tuple[MessageState, ...] = (
    "ok",
    "malformed",
    "too_large",
    "rejected",
    "deferred",
    "vanished",
)
BODY_VERSION = 2  # the version of a deferred message's second event


FINGERPRINT_V1 = "fp:"
FINGERPRINT_V2 = "fp2:"


def content_fingerprint(v1: str, body_sha256: bytes) -> str:
    """The fingerprint, version 2, of a message whose version-1 fingerprint is ``v1``
    (Message-ID, Date, size): that plus the SHA-256 of its bytes, headers and body. Two
    different messages that agree on all three stay two; the same bytes seen again
    (a UIDVALIDITY reset) stay one, whether the body was read inline or streamed."""
    digest = hashlib.sha256()
    digest.update(v1.encode())
    digest.update(b"\x00")
    digest.update(body_sha256)
    return FINGERPRINT_V2 + digest.hexdigest()


def message_id(account_id: UUID | str, provider_message_id: str) -> UUID:
    return stream_id("message", str(account_id), provider_message_id)


@dataclass(frozen=True, kw_only=True)
class MessageIngested(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.MessageIngested"

    tenant_id: str
    account_id: str
    provider_message_id: str
    thread_key: str
    message_id_header: str  # ciphertext
    references: str  # ciphertext (JSON list)
    sender: str  # ciphertext (JSON list of {name, address})
    to: str  # ciphertext
    cc: str  # ciphertext
    subject: str  # ciphertext
    snippet: str  # ciphertext
    received_at: str  # ISO 8601
    body_ref: str | None
    size_bytes: int
    folder: str
    state: MessageState
    defects: list[str]
    extra: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class MessageBodyFetched(DomainEvent):
    """The body of a ``deferred`` message came: what the body decides, the rest stays."""

    TOPIC: ClassVar[str] = "tidings.mail.MessageBodyFetched"

    tenant_id: str
    account_id: str
    snippet: str  # ciphertext
    body_ref: str | None
    size_bytes: int
    state: FinalState
    defects: list[str]


@dataclass(frozen=True, kw_only=True)
class MessageBodyVanished(DomainEvent):
    """A ``deferred`` message the server no longer has: its body will never come."""

    TOPIC: ClassVar[str] = "tidings.mail.MessageBodyVanished"

    tenant_id: str
    account_id: str
    reason: str  # expunged | uidvalidity_changed


EVENTS: tuple[type[DomainEvent], ...] = (MessageIngested, MessageBodyFetched, MessageBodyVanished)
