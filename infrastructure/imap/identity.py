"""Provider message ids and typed metadata from FETCH responses. Pure.

A provider message id must survive a UIDVALIDITY reset (SPEC §6), so it never
uses the UID:

- ``emailid:<id>`` — RFC 8474 OBJECTID ``EMAILID``, when the server has it;
- ``gm:<id>`` — Gmail's ``X-GM-MSGID``;
- ``fp:<sha256 hex>`` — otherwise a fingerprint of the Message-ID and Date
  header values (unfolded, whitespace-collapsed) and RFC822.SIZE.

The fingerprint treats byte-identical copies of one message as one message,
which is what dedup wants. A server that gains OBJECTID later (e.g. Dovecot
2.3 → 2.4) yields new ids for messages fetched again after a reset.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from application.mail.ports import MessageRef

HEADER_FIELDS_ITEM = "BODY.PEEK[HEADER.FIELDS (MESSAGE-ID DATE)]"
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


def message_ref(uid: int, item: Mapping[bytes, Any]) -> MessageRef:
    """Typed metadata from one message's FETCH items (missing items tolerated)."""
    size = item.get(b"RFC822.SIZE")
    size = size if isinstance(size, int) and size >= 0 else 0
    internal = item.get(b"INTERNALDATE")
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
