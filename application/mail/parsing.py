"""The MIME parsing port: only what a ``MessageIngested`` needs, never raising."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

# Caps on what one message's headers can put in an event (more is a defect, cut off).
MAX_HEADER_CHARS = 10_000  # one header value; RFC 5322 lines are at most 998 characters
MAX_HEADER_VALUES = 100  # values kept per header name
MAX_ADDRESSES = 1_000  # per address field
MAX_REFERENCES = 1_000

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 12, 31, 23, 59, 59, tzinfo=UTC)
MAX_OFFSET = timedelta(hours=14)  # real UTC offsets lie within -12:00 .. +14:00


def in_date_range(moment: datetime) -> bool:
    """Within 1970-2200 once in UTC, with a real UTC offset (within ±14 hours): the dates a
    message may carry into an event (``Date``, INTERNALDATE, ``receivedAt``)."""
    offset = moment.utcoffset()
    if offset is not None and abs(offset) > MAX_OFFSET:
        return False
    try:
        utc = moment.replace(tzinfo=UTC) if offset is None else moment.astimezone(UTC)
    except (OverflowError, ValueError):
        return False
    return EARLIEST <= utc <= LATEST


@dataclass(frozen=True, slots=True)
class Address:
    name: str
    address: str


@dataclass(frozen=True, slots=True)
class ParsedMessage:
    message_id: str | None = None
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    sender: tuple[Address, ...] = ()
    to: tuple[Address, ...] = ()
    cc: tuple[Address, ...] = ()
    subject: str = ""
    date: datetime | None = None
    snippet: str = ""
    authentication_results: tuple[str, ...] = ()
    defects: tuple[str, ...] = field(default=())

    @property
    def malformed(self) -> bool:
        return bool(self.defects)


class MimeParser(Protocol):
    def parse_bytes(self, raw: bytes) -> ParsedMessage: ...

    def parse_blob(self, ref: str) -> ParsedMessage:
        """Parse a stored message from its blob without loading all of it."""
        ...

    def dmarc_failed(self, parsed: ParsedMessage, authserv_id: str) -> bool:
        """True when that server's Authentication-Results say DMARC failed."""
        ...
