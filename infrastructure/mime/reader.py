"""Read what a MessageIngested event needs from raw MIME — quickly, never raising.

Parsing uses ``email`` with ``policy=compat32`` (much faster than
``policy.default``), but ordinary messages skip its line-by-line feedparser:
``mime_scan`` builds the very same tree faster and leaves any shape it does not
reproduce exactly to the feedparser. The result is the parsing port's
``ParsedMessage`` itself; header values are read by ``headers``, the snippet by
``snippet``, charsets by ``charsets``. Only the fields we keep are decoded: Message-ID,
In-Reply-To, References, From/To/Cc, Subject (RFC 2047), Date, a snippet from the
first text/plain part (else the first text/html part, tags stripped), and
Authentication-Results.

Everything in a message is data: decoding is total and bounded. Only the standard
library's text charsets decode (``unicode-escape``, ``punycode``, ``idna``, ``rot13``
and the like are codecs, not charsets: they decode as an unknown charset does);
text never carries a lone surrogate or NUL; header values, address lists and
reference lists have caps (``application.mail.parsing``), header parameters are read
from a header's head (``bounded``), and no step rescans text from each position (time
stays linear in the message); a Date outside 1970-2200 or with an offset beyond ±14
hours is dropped.

Fault tolerance: every defect the parser reports, and every problem met while
decoding (8-bit header bytes that are not UTF-8, undecodable encoded words,
unknown charsets, bad base64, unreadable or impossible dates, missing From/Date,
values over a cap), is listed in ``defects`` by name; ``malformed`` is true when
there is any. What could be read is returned either way.

Big messages (in the blob store) are parsed from a file: only the first
``head_bytes`` are read, so memory stays bounded; boundary and base64 defects
that the cut itself causes are not reported, and a text part that starts past
the cut gives no snippet.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from email.message import Message
from email.parser import BytesParser
from email.policy import compat32
from email.utils import parsedate_to_datetime
from typing import BinaryIO

from application.mail.parsing import (
    MAX_HEADER_CHARS,
    MAX_HEADER_VALUES,
    MAX_REFERENCES,
    ParsedMessage,
    in_date_range,
)
from infrastructure.mime import scan as mime_scan
from infrastructure.mime.bounded import BoundedMessage
from infrastructure.mime.headers import HeaderText
from infrastructure.mime.snippet import message_snippet

SNIPPET_CHARS = 200
HEAD_BYTES = 256 * 1024
_MSGID = re.compile(r"<([^<>\s]+)>")
_TRUNCATION_DEFECTS = {
    "StartBoundaryNotFoundDefect",
    "CloseBoundaryNotFoundDefect",
    "MultipartInvariantViolationDefect",
    "InvalidBase64PaddingDefect",
    "InvalidBase64LengthDefect",
}


def parse_message(raw: bytes, *, snippet_chars: int = SNIPPET_CHARS) -> ParsedMessage:
    return _parse(raw, snippet_chars=snippet_chars, truncated=False)


def parse_message_file(
    f: BinaryIO, *, head_bytes: int = HEAD_BYTES, snippet_chars: int = SNIPPET_CHARS
) -> ParsedMessage:
    """Parse from a binary file reading at most ``head_bytes`` (+1) of it."""
    data = f.read(head_bytes + 1)
    truncated = len(data) > head_bytes
    if truncated:
        data = data[: data.rfind(b"\n", 0, head_bytes) + 1] or data[:head_bytes]
    return _parse(data, snippet_chars=snippet_chars, truncated=truncated)


def _parse(raw: bytes, *, snippet_chars: int, truncated: bool) -> ParsedMessage:  # noqa: C901
    defects: list[str] = []
    try:
        msg = _fast_tree(raw)
        if msg is None:
            msg = BytesParser(BoundedMessage, policy=compat32).parsebytes(raw)
    except Exception as exc:  # the parser is lenient; this is a last resort
        return _empty([f"ParserFailure:{type(exc).__name__}"])
    headers: dict[str, list[str]] = {}
    for name, value in msg.raw_items():
        values = headers.setdefault(name.strip().lower()[:MAX_HEADER_CHARS], [])
        if len(values) < MAX_HEADER_VALUES:
            values.append(value)
        elif len(values) == MAX_HEADER_VALUES:
            defects.append("TooManyHeaders")
    if truncated and not _headers_complete(raw):
        defects.append("HeadersTooLong")
    text = HeaderText(headers, defects)
    snippet = message_snippet(msg, snippet_chars, defects)
    for part in msg.walk():
        for defect in part.defects:
            name = type(defect).__name__
            if not (truncated and name in _TRUNCATION_DEFECTS):
                defects.append(name)
    if not headers:
        defects.append("MissingHeaders")
    else:
        defects.extend(f"MissingHeader:{h}" for h in ("From", "Date") if h.lower() not in headers)
    return ParsedMessage(
        message_id=next(iter(_msgids(text.first("message-id"))), None),
        in_reply_to=next(iter(_msgids(text.first("in-reply-to"))), None),
        references=_capped(_msgids(" ".join(text.all("references"))), MAX_REFERENCES, defects),
        sender=text.addresses("from"),
        to=text.addresses("to"),
        cc=text.addresses("cc"),
        subject=text.decoded("subject"),
        date=_date(text.first("date"), defects),
        snippet=snippet,
        authentication_results=tuple(text.all("authentication-results")),
        defects=tuple(dict.fromkeys(defects)),
    )


def _fast_tree(raw: bytes) -> Message | None:
    """The compat32 tree from the fast scan; None (the full parser runs) if unsure or if the
    scan itself fails."""
    try:
        return mime_scan.parse(raw)
    except Exception:  # never let the shortcut cost a message
        return None


def _capped(items: tuple[str, ...], limit: int, defects: list[str]) -> tuple[str, ...]:
    if len(items) <= limit:
        return items
    defects.append("TooManyReferences")
    return items[:limit]


def _msgids(value: str) -> tuple[str, ...]:
    ids = tuple(f"<{m}>" for m in _MSGID.findall(value))
    if ids or not value.strip():
        return ids
    return tuple(value.split())


def _date(value: str, defects: list[str]) -> datetime | None:
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        defects.append("UnparseableDate")
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    if not in_date_range(parsed):
        defects.append("ImpossibleDate")
        return None
    return parsed


def _headers_complete(raw: bytes) -> bool:
    return b"\n\n" in raw or b"\r\n\r\n" in raw


def _empty(defects: Iterable[str]) -> ParsedMessage:
    return ParsedMessage(defects=tuple(defects))
