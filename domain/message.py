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
longer has the message: state ``vanished``). No other stream has a version 2 that is
not a ``MessageFlagsChanged`` or a retention event (``domain.message_retention``), and
neither takes version 2 of a stream still ``deferred`` (the flag mirror holds it until
the body came; retention comes only after it, never in its place).

``MessageFlagsChanged`` carries a message's whole flag set (bounded: ``message_flags``)
each time it differs from the set stored before; ``MessageIngested.extra["flags"]`` is the
set at arrival (absent in events recorded before flags were kept: no flags).

``MessageFoldersChanged`` carries the message's whole folder set (sorted names, never
empty) each time the server's placement differs from the set stored before (the
folder at arrival, ``MessageIngested.folder``, until the first one); ``MessageDeleted``
ends the message's life on the server (gone from every synced folder at the end of an
account's pass): its events stay, read models say ``deleted``. Neither takes version 2
of a stream still ``deferred``. ``MessageRestored`` undoes a deletion as expunged when
the same message is found on the server again (never one by retention,
``MessageExpired``): its folders as found, its state as before.
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
# What read models show: a message's state, or ``deleted`` once gone from every folder.
ListedState = MessageState | Literal["deleted"]
Direction = Literal["inbound", "outbound"]
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
    """``direction``: ``inbound`` | ``outbound``, decided by the application (From is
    sealed here); events recorded before it have none and read as ``inbound``."""


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
    reason: str  # expunged | uidvalidity_changed | folder_gone


@dataclass(frozen=True, kw_only=True)
class MessageFlagsChanged(DomainEvent):
    """The message's flags as the server has them now: the whole set, not a delta, so
    applying it twice or after a rebuild gives the same row."""

    TOPIC: ClassVar[str] = "tidings.mail.MessageFlagsChanged"

    tenant_id: str
    account_id: str
    flags: list[str]  # sorted, bounded (``domain.message_flags``)
    unread: bool
    flagged: bool


def stored_flags(events: list[DomainEvent]) -> tuple[str, ...] | None:
    """The flag set a message stream holds (None: not a message stream)."""
    flags: tuple[str, ...] | None = None
    for event in events:
        if isinstance(event, MessageIngested):
            flags = tuple(event.extra.get("flags", ()))
        elif isinstance(event, MessageFlagsChanged):
            flags = tuple(event.flags)
    return flags


@dataclass(frozen=True, kw_only=True)
class MessageFoldersChanged(DomainEvent):
    """The folders the server shows the message in now: the whole set (a copy is in
    several), with what this change added and removed, so a replay gives the same row."""

    TOPIC: ClassVar[str] = "tidings.mail.MessageFoldersChanged"

    tenant_id: str
    account_id: str
    folders: list[str]  # sorted, not empty
    added: list[str]
    removed: list[str]


@dataclass(frozen=True, kw_only=True)
class MessageDeleted(DomainEvent):
    """Gone from every synced folder at the end of an account's pass."""

    TOPIC: ClassVar[str] = "tidings.mail.MessageDeleted"

    tenant_id: str
    account_id: str
    reason: str  # expunged


@dataclass(frozen=True, kw_only=True)
class MessageRestored(DomainEvent):
    """A message deleted as expunged is on the server again with the same identity (its
    folder came back, or a server's glitch had hidden it): it lives again in ``folders``,
    with the ``state`` it had before the deletion."""

    TOPIC: ClassVar[str] = "tidings.mail.MessageRestored"

    tenant_id: str
    account_id: str
    folders: list[str]  # sorted, not empty
    state: str  # as before the deletion (``state_before_deletion``)


def stored_folders(events: list[DomainEvent]) -> tuple[str, ...] | None:
    """The folder set a message stream holds: () once deleted, None for no message."""
    folders: tuple[str, ...] | None = None
    for event in events:
        if isinstance(event, MessageIngested):
            folders = (event.folder,)
        elif isinstance(event, MessageFoldersChanged | MessageRestored):
            folders = tuple(event.folders)
        elif isinstance(event, MessageDeleted):
            folders = ()
    return folders


def state_before_deletion(events: list[DomainEvent]) -> str | None:
    """The ``state`` the read models gave the message before any deletion: its arrival's,
    its body's when it came, ``vanished`` when it never will (None: no message)."""
    state: str | None = None
    for event in events:
        if isinstance(event, MessageIngested) or (
            isinstance(event, MessageBodyFetched) and state == "deferred"
        ):
            state = event.state
        elif isinstance(event, MessageBodyVanished) and state == "deferred":
            state = "vanished"
    return state


def awaiting_body(events: list[DomainEvent]) -> bool:
    """A ``deferred`` stream whose version 2 belongs to its body (``BODY_VERSION``)."""
    return (
        len(events) == 1
        and isinstance(events[0], MessageIngested)
        and (events[0].state == "deferred")
    )


EVENTS: tuple[type[DomainEvent], ...] = (
    MessageIngested,
    MessageBodyFetched,
    MessageBodyVanished,
    MessageFlagsChanged,
    MessageFoldersChanged,
    MessageDeleted,
    MessageRestored,
)
