"""Provider message ids and typed metadata from FETCH responses. Pure.

A provider message id must survive a UIDVALIDITY reset, so it never uses the UID:

- ``emailid:<id>`` — RFC 8474 OBJECTID ``EMAILID``, when the server has it;
- ``gm:<id>`` — Gmail's ``X-GM-MSGID``;
- ``fp:<sha256 hex>`` — otherwise a fingerprint of the Message-ID and Date
  header values (unfolded, whitespace-collapsed) and RFC822.SIZE.

The fingerprint treats byte-identical copies of one message as one message,
which is what dedup wants. A server that gains OBJECTID later (e.g. Dovecot
2.3 → 2.4) yields new ids for messages fetched again after a reset.

Values a server sends are data: ``refusal`` names what makes a message's metadata
unusable (a size outside 0…2^53, an INTERNALDATE outside 1970-2200 or with an offset
no place has), so the session skips it with that reason instead of letting the value
reach a column or a date computation; ``valid_id`` bounds UIDs and UIDVALIDITY to
1…2^32 - 1 (RFC 3501's nz-number).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from application.mail.ports import MessageRef

HEADER_FIELDS_ITEM = "BODY.PEEK[HEADER.FIELDS (MESSAGE-ID DATE)]"
ID_MAX = 2**32 - 1
SIZE_MAX = 2**53
MODSEQ_MAX = 2**63 - 1
YEARS = (1970, 2200)
OFFSET_MAX = timedelta(hours=14)  # the widest offset in use (UTC+14, Kiribati)
_WS = re.compile(rb"\s+")


def header_values(block: bytes) -> tuple[bytes | None, bytes | None]:
    """The Message-ID and Date values of a ``HEADER.FIELDS`` block (first of each)."""
    message_id: bytes | None = None
    date: bytes | None = None
    name = b""
    value = b""
    for line in [*block.splitlines(), b""]:
        if line[:1] in (b" ", b"\t") and name:
            value += b" " + line.strip()
            continue
        if name == b"message-id" and message_id is None:
            message_id = _WS.sub(b" ", value).strip()
        elif name == b"date" and date is None:
            date = _WS.sub(b" ", value).strip()
        head, sep, rest = line.partition(b":")
        name, value = (head.strip().lower(), rest.strip()) if sep else (b"", b"")
    return message_id, date


def fingerprint(message_id: bytes | None, date: bytes | None, size: int) -> str:
    digest = hashlib.sha256()
    for part in (message_id or b"", date or b"", str(size).encode()):
        digest.update(len(part).to_bytes(4, "big"))
        digest.update(part)
    return "fp:" + digest.hexdigest()


def provider_message_id(item: Mapping[bytes, Any], size: int) -> str:
    emailid = item.get(b"EMAILID")
    if isinstance(emailid, tuple | list) and emailid:
        emailid = emailid[0]
    if isinstance(emailid, bytes) and emailid:
        return "emailid:" + emailid.decode("ascii", "replace")
    gm = item.get(b"X-GM-MSGID")
    if isinstance(gm, int):
        return f"gm:{gm}"
    message_id, date = header_values(_header_block(item))
    return fingerprint(message_id, date, size)


def valid_id(value: object) -> bool:
    """A UID or UIDVALIDITY: an integer in 1…2^32 - 1."""
    return type(value) is int and 1 <= value <= ID_MAX


def refusal(item: Mapping[bytes, Any]) -> str | None:
    """Why a message's FETCH items cannot be used (None: they can). Missing items are
    tolerated, as in ``message_ref``; present ones must be in range."""
    if b"RFC822.SIZE" in item:
        size = item[b"RFC822.SIZE"]
        if type(size) is not int:
            return "size_not_a_number"
        if not 0 <= size <= SIZE_MAX:
            return "size_out_of_range"
    internal = item.get(b"INTERNALDATE")
    if internal is not None:
        if not isinstance(internal, datetime):
            return "internaldate_unreadable"
        offset = internal.utcoffset()
        if offset is not None and abs(offset) > OFFSET_MAX:
            return "internaldate_offset_impossible"
        if not YEARS[0] <= internal.year <= YEARS[1]:
            return "internaldate_out_of_range"
    return None


def message_ref(uid: int, item: Mapping[bytes, Any]) -> MessageRef:
    """Typed metadata from one message's FETCH items (missing items tolerated)."""
    size = item.get(b"RFC822.SIZE")
    size = size if type(size) is int and 0 <= size <= SIZE_MAX else 0
    internal = item.get(b"INTERNALDATE")
    if refusal({b"INTERNALDATE": internal}) is not None:
        internal = None
    flags = item.get(b"FLAGS") or ()
    return MessageRef(
        uid=uid,
        provider_message_id=provider_message_id(item, size),
        size=size,
        internal_date=_utc(internal) if isinstance(internal, datetime) else None,
        flags=tuple(_text(f) for f in flags),
    )


def _utc(when: datetime) -> datetime:
    return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)


def _header_block(item: Mapping[bytes, Any]) -> bytes:
    for key, value in item.items():
        if key.startswith(b"BODY[HEADER.FIELDS") and isinstance(value, bytes):
            return value
    return b""


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
