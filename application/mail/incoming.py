"""What one message may bring into a ``MessageIngested``: values a codec round trip keeps
exactly and the read model's columns hold, whoever sent them (a mail server, a parser,
an ``ingest-message`` caller). A value out of range is brought into range and noted as a
defect; a cursor out of range refuses its page (``PageRefused``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from application.errors import ApplicationError
from application.mail.parsing import Address, in_date_range
from application.mail.ports import MailboxCursor
from domain.message import Direction, MessageState

MAX_SIZE_BYTES = 2**53  # sizes a JSON reader and every read-model column hold exactly
MAX_UID = 2**32 - 1  # RFC 3501: UIDs and UIDVALIDITY are 32-bit
MAX_MODSEQ = 2**63 - 1  # RFC 7162: 63-bit
MAX_TEXT_CHARS = 10_000  # subject, ids, names: more than any real header holds
MAX_SNIPPET_CHARS = 2_000
MAX_ITEMS = 1_000  # addresses per field, references
_SURROGATE = re.compile("[\ud800-\udfff]")


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
    direction: Direction = "inbound"
    defects: tuple[str, ...] = field(default=())
    flags: tuple[str, ...] = ()  # bounded and sorted (``domain.message_flags``)


class PageRefused(ApplicationError):
    """A page that cannot be stored (a value out of range); its account's failure alone."""


def check_cursor(cursor: MailboxCursor) -> None:
    """Raise ``PageRefused`` unless every cursor value is within its protocol's range."""
    values = {
        "uidvalidity": (cursor.uidvalidity, 1, MAX_UID),
        "last_uid": (cursor.last_uid, 0, MAX_UID),
        "highestmodseq": (cursor.highestmodseq, 0, MAX_MODSEQ),
        "backfill_until": (cursor.backfill_until, 0, MAX_UID),
    }
    for name, (value, low, high) in values.items():
        if value is not None and not (isinstance(value, int) and low <= value <= high):
            raise PageRefused(f"the server's {name} is out of range")


def in_range(message: IncomingMessage, now: datetime) -> IncomingMessage:
    """The message with every value an event can hold: text without lone surrogates or
    NUL and of bounded length, a size within 0..2^53, a date within 1970-2200. A value
    that had to change is a defect, and an ``ok`` message becomes ``malformed``."""
    defects: list[str] = []
    size = message.size_bytes
    if not (isinstance(size, int) and 0 <= size <= MAX_SIZE_BYTES):
        size = 0
        defects.append("SizeOutOfRange")
    received = message.received_at
    if not in_date_range(received):
        received = now
        defects.append("DateOutOfRange")
    text = _Text(defects)
    fixed = replace(
        message,
        provider_message_id=text(message.provider_message_id, MAX_TEXT_CHARS, "ProviderId"),
        received_at=received,
        size_bytes=size,
        message_id_header=text.optional(message.message_id_header, "MessageId"),
        references=text.items(message.references, "References"),
        sender=text.addresses(message.sender, "From"),
        to=text.addresses(message.to, "To"),
        cc=text.addresses(message.cc, "Cc"),
        subject=text(message.subject, MAX_TEXT_CHARS, "Subject"),
        snippet=text(message.snippet, MAX_SNIPPET_CHARS, "Snippet"),
        body_ref=text.optional(message.body_ref, "BodyRef"),
        folder=text(message.folder, MAX_TEXT_CHARS, "Folder"),
        provider_thread_id=text.optional(message.provider_thread_id, "ThreadId"),
        defects=tuple(text(d, 200, "Defect") for d in message.defects[:MAX_ITEMS]),
    )
    if not defects:
        return fixed
    state: MessageState = "malformed" if fixed.state == "ok" else fixed.state
    return replace(fixed, state=state, defects=tuple(dict.fromkeys((*fixed.defects, *defects))))


class _Text:
    """Makes text storable, noting in ``defects`` what it had to change."""

    def __init__(self, defects: list[str]) -> None:
        self._defects = defects

    def __call__(self, value: str, limit: int, name: str) -> str:
        if not isinstance(value, str):
            self._defects.append(f"NotText:{name}")
            return ""
        if len(value) > limit:
            value = value[:limit]
            self._defects.append(f"TooLong:{name}")
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
            self._defects.append(f"NulInText:{name}")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                value = _SURROGATE.sub("\ufffd", value)
                self._defects.append(f"LoneSurrogate:{name}")
        return value

    def optional(self, value: str | None, name: str) -> str | None:
        return None if value is None else self(value, MAX_TEXT_CHARS, name)

    def items(self, values: Sequence[str], name: str) -> tuple[str, ...]:
        if len(values) > MAX_ITEMS:
            self._defects.append(f"TooMany:{name}")
        return tuple(self(v, MAX_TEXT_CHARS, name) for v in values[:MAX_ITEMS])

    def addresses(self, values: Sequence[Address], name: str) -> tuple[Address, ...]:
        if len(values) > MAX_ITEMS:
            self._defects.append(f"TooMany:{name}")
        return tuple(
            Address(self(a.name, MAX_TEXT_CHARS, name), self(a.address, MAX_TEXT_CHARS, name))
            for a in values[:MAX_ITEMS]
        )
