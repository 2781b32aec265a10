"""The MIME parsing port: only what a ``MessageIngested`` needs, never raising."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

# Caps on what one message's headers can put in an event (more is a defect, cut off).
MAX_HEADER_CHARS = 10_000  # one header value; RFC 5322 lines are at most 998 characters
MAX_HEADER_VALUES = 100  # values kept per header name
MAX_ADDRESSES = 1_000  # per address field
MAX_REFERENCES = 1_000


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
