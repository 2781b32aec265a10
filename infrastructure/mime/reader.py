"""Read what a MessageIngested event needs from raw MIME — quickly, never raising.

Parsing uses ``email`` with ``policy=compat32`` (much faster than
``policy.default``), but ordinary messages skip its line-by-line feedparser:
``mime_scan`` builds the very same tree faster and leaves any shape it does not
reproduce exactly to the feedparser. The result is the parsing port's
``ParsedMessage`` itself. Only the fields we keep are decoded: Message-ID,
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

import codecs
import html
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from email.header import decode_header
from email.message import Message
from email.parser import BytesParser
from email.policy import compat32
from email.utils import getaddresses, parsedate_to_datetime
from typing import BinaryIO

from application.mail.parsing import (
    MAX_ADDRESSES,
    MAX_HEADER_CHARS,
    MAX_HEADER_VALUES,
    MAX_REFERENCES,
    Address,
    ParsedMessage,
    in_date_range,
)
from infrastructure.mime import scan as mime_scan
from infrastructure.mime.bounded import BoundedMessage

SNIPPET_CHARS = 200
HEAD_BYTES = 256 * 1024
_PLAIN_SCAN = 8 * 1024
_HTML_SCAN = 64 * 1024
_MSGID = re.compile(r"<([^<>\s]+)>")
_FOLD = re.compile(r"\r?\n(?=[ \t])")
# HTML is stripped by scanning, never by a regex that rescans the rest of the text from
# each "<" (quadratic on a body of unclosed tags or comments).
_HIDDEN_OPEN = re.compile(r"<(script|style|head|title)\b|<!--", re.IGNORECASE)
_HIDDEN_CLOSE = {
    tag: re.compile(rf"</{tag}\s*>", re.IGNORECASE) for tag in ("script", "style", "head", "title")
}
_ADDR = r"[^<>\s@\",;:()\\]+@[^<>\s@\",;:()\\]+"
# The name is an atomic group: a lazy one would retry every split of a long run of
# spaces before "<" (quadratic); names are stripped by the caller.
_SIMPLE_ADDRESS = re.compile(
    rf'\s*(?:(?:"([^"\\]*)"|(?>([^<>@,";:\\()]*)))\s*<({_ADDR})>|({_ADDR}))\s*(?:,|$)'
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Codecs of the standard library that are not charsets: they turn text into control
# (escape sequences decoding to lone surrogates, IDNA labels) or bytes into bytes.
_NOT_CHARSETS = frozenset(
    {
        "unicode-escape",
        "raw-unicode-escape",
        "punycode",
        "idna",
        "undefined",
        "charmap",
        "base64",
        "bz2",
        "hex",
        "quopri",
        "rot-13",
        "uu",
        "zlib",
    }
)
_LENIENT_CHARSETS = {"unknown-8bit", "x-unknown", "unknown", "8bit", "default", "x-user-defined"}
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
    text = _HeaderText(headers, defects)
    snippet = _snippet(msg, snippet_chars, defects)
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


class _HeaderText:
    """Header values as text: raw 8-bit bytes recovered, unfolded, RFC 2047 decoded on demand."""

    def __init__(self, headers: dict[str, list[str]], defects: list[str]) -> None:
        self._headers = headers
        self._defects = defects

    def all(self, name: str) -> list[str]:
        return [self._unraw(v) for v in self._headers.get(name, ())]

    def first(self, name: str) -> str:
        values = self._headers.get(name)
        return self._unraw(values[0]) if values else ""

    def decoded(self, name: str) -> str:
        return self._rfc2047(self.first(name))

    def addresses(self, name: str) -> tuple[Address, ...]:
        values = self.all(name)
        if not values:
            return ()
        try:
            pairs = _simple_addresses(values) or getaddresses(values)
        except Exception:  # malformed address lists can trip the parser
            self._defects.append(f"UnparseableAddress:{name}")
            return ()
        out = tuple(
            Address(self._rfc2047(n).strip(), a.strip()) for n, a in pairs if n.strip() or a.strip()
        )
        if len(out) > MAX_ADDRESSES:
            self._defects.append(f"TooManyAddresses:{name}")
            out = out[:MAX_ADDRESSES]
        if not out and any(v.strip() for v in values):
            self._defects.append(f"UnparseableAddress:{name}")
        return out

    def _unraw(self, value: str) -> str:
        if len(value) > MAX_HEADER_CHARS:
            self._defects.append("HeaderTooLong")
            value = value[:MAX_HEADER_CHARS]
        value = _FOLD.sub("", value).strip()
        if value.isascii():
            return _CONTROL.sub("", value) if _CONTROL.search(value) else value
        value = self._recover_8bit(value)
        return _storable(_CONTROL.sub("", value), self._defects)

    def _recover_8bit(self, value: str) -> str:
        try:
            raw = value.encode("ascii", "surrogateescape")
        except UnicodeEncodeError:
            return value
        try:
            return raw.decode("utf-8")  # RFC 6532 allows UTF-8 headers
        except UnicodeDecodeError:
            self._defects.append("NonUtf8HeaderBytes")
            return raw.decode("latin-1")

    def _rfc2047(self, value: str) -> str:
        if "=?" not in value:
            return value
        try:
            parts = decode_header(value)
        except Exception:  # HeaderParseError, binascii.Error, …
            self._defects.append("InvalidEncodedWord")
            return value
        out = []
        for chunk, charset in parts:
            if isinstance(chunk, str):
                out.append(chunk)
            elif charset is None:
                out.append(chunk.decode("raw-unicode-escape", "replace"))
            else:
                out.append(_decode(chunk, charset, self._defects))
        return _storable(_CONTROL.sub("", "".join(out)), self._defects)


def _simple_addresses(values: list[str]) -> list[tuple[str, str]] | None:
    """Fast path for plain ``a@b`` / ``Name <a@b>`` / ``"Name" <a@b>`` lists.

    None when anything else appears (comments, groups, escapes): the full parser runs then.
    """
    pairs: list[tuple[str, str]] = []
    for value in values:
        pos, end = 0, len(value)
        while pos < end:
            match = _SIMPLE_ADDRESS.match(value, pos)
            if not match or match.end() == pos:
                return None
            name = match.group(1) if match.group(1) is not None else match.group(2) or ""
            pairs.append((name, match.group(3) or match.group(4)))
            pos = match.end()
    return pairs


def _snippet(msg: Message, limit: int, defects: list[str]) -> str:
    part, is_html = _first_text_part(msg)
    if part is None:
        return ""
    try:
        payload = part.get_payload(decode=True)
    except Exception:  # payload decoders are lenient; last resort
        defects.append("UndecodableBody")
        return ""
    if not isinstance(payload, bytes):
        return ""
    scan = _HTML_SCAN if is_html else _PLAIN_SCAN
    charset = part.get_content_charset() or "utf-8"
    text = _decode(payload[:scan], charset, defects, final=len(payload) <= scan)
    if is_html:
        text = html.unescape(_strip_tags(_drop_hidden(text)))
    return _collapse(text, limit)


def _drop_hidden(text: str) -> str:
    """``text`` with each script, style, head and title element and each comment made one
    space (an element or comment without its end stays), in one pass."""
    parts: list[str] = []
    pos = 0
    unclosed: set[str] = set()  # no end from here on: later ones have none either
    while (found := _HIDDEN_OPEN.search(text, pos)) is not None:
        tag = (found.group(1) or "!--").lower()
        end = -1
        if tag not in unclosed:
            if tag == "!--":
                close = text.find("-->", found.end())
                end = close + 3 if close >= 0 else -1
            else:
                match = _HIDDEN_CLOSE[tag].search(text, found.end())
                end = match.end() if match else -1
        if end < 0:
            unclosed.add(tag)
            parts.append(text[pos : found.start() + 1])
            pos = found.start() + 1
            continue
        parts.append(text[pos : found.start()])
        parts.append(" ")
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def _strip_tags(text: str) -> str:
    """Each ``<`` up to the next ``>`` made one space, in one pass."""
    parts: list[str] = []
    pos = 0
    while (start := text.find("<", pos)) >= 0:
        end = text.find(">", start)
        if end < 0:
            break
        parts.append(text[pos:start])
        parts.append(" ")
        pos = end + 1
    parts.append(text[pos:])
    return "".join(parts)


def _collapse(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text`` with runs of whitespace and control
    characters made one space. Whitespace collapses the same in any prefix of the text, so
    a prefix that already gives ``limit`` characters is enough (the body can be 8 KB)."""
    window = 4 * limit
    while 0 < window < len(text):
        words = " ".join(_CONTROL.sub(" ", text[:window]).split())
        if len(words) >= limit:
            return words[:limit].rstrip()
        window *= 4
    return " ".join(_CONTROL.sub(" ", text).split())[:limit].rstrip()


def _first_text_part(msg: Message) -> tuple[Message | None, bool]:
    first_html: Message | None = None
    for part in msg.walk():
        if part.is_multipart():
            continue
        ctype = part.get_content_type()
        if ctype not in ("text/plain", "text/html"):
            continue
        if str(part.get("Content-Disposition", "")).strip().lower().startswith("attachment"):
            continue
        if ctype == "text/plain":
            return part, False
        if first_html is None:
            first_html = part
    return first_html, first_html is not None


def _decode(data: bytes, charset: str, defects: list[str], *, final: bool = True) -> str:
    """Decode text (never raising, no lone surrogates); with ``final=False`` a multi-byte
    sequence cut at the end is dropped."""
    charset = charset.strip().strip('"').lower()[:64]
    if charset in _LENIENT_CHARSETS or charset in ("us-ascii", "ascii"):
        charset = "utf-8"
    codec = _text_codec(charset)
    if codec is None:
        defects.append("UnknownCharset")
        codec = "utf-8"
    try:
        text = codecs.getincrementaldecoder(codec)().decode(data, final=final)
    except UnicodeError:  # UnicodeDecodeError, or a codec's own (UTF-16 without a BOM)
        defects.append("CharsetMismatch")
        fallback = "cp1252" if codec == "utf-8" and _decodes(data, "cp1252") else codec
        try:
            text = data.decode(fallback, "replace")
        except UnicodeError:
            text = data.decode("utf-8", "replace")
    return _storable(text, defects)


def _text_codec(charset: str) -> str | None:
    """The standard library's codec for a text charset; None for anything else."""
    try:
        info = codecs.lookup(charset)
    except (LookupError, ValueError, TypeError):
        return None
    decoder = info.incrementaldecoder
    if info.name in _NOT_CHARSETS or decoder is None:
        return None
    if not decoder.__module__.startswith("encodings."):  # a codec someone registered
        return None
    return info.name


def _storable(text: str, defects: list[str]) -> str:
    """``text`` with lone surrogates and NUL replaced (an event must hold valid Unicode)."""
    if text.isascii():
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if _SURROGATE.search(text):
        defects.append("LoneSurrogate")
        text = _SURROGATE.sub("\ufffd", text)
    return text


def _capped(items: tuple[str, ...], limit: int, defects: list[str]) -> tuple[str, ...]:
    if len(items) <= limit:
        return items
    defects.append("TooManyReferences")
    return items[:limit]


def _decodes(data: bytes, codec: str) -> bool:
    try:
        data.decode(codec)
    except UnicodeError:
        return False
    return True


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
