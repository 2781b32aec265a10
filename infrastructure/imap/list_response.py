"""LIST and STATUS answers read from imaplib's untagged data, and folder names decoded. Pure.

imaplib hands each untagged LIST (or STATUS) response over as items: a line with a
literal comes as ``(text ending in "{size}", literal)`` and the rest of that line follows
as the next item; a plain ``bytes`` item ends a response. ``responses`` joins those back
into one response each, as tokens: ``(``, ``)``, atoms, and strings (quoted or literal).

Read here, and nothing more (RFC 3501, 5258, 5819, 8474):

- ``LIST``: ``(attributes) delimiter name [extended items]``; the delimiter is a quoted
  character or NIL, the name an atom, a quoted string or a literal.
- ``STATUS``: ``name (ITEM value ...)``; values are numbers, or ``(id)`` for MAILBOXID.

Everything a server sends is bounded here: tokens per response, parenthesis depth, the
size of one token. A response that does not fit the shape is ``None`` (the caller counts
it ``malformed``), never an exception.

Names are modified UTF-7 (RFC 3501 5.1.3), decoded strictly: printable ASCII stands for
itself except ``&``, ``&-`` is ``&``, ``&...-`` is modified base64 of UTF-16BE. Bytes
outside printable ASCII, an unterminated shift, bad base64, or an encoded run that is
printable ASCII (which the encoding forbids) make a name undecodable.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

MAX_TOKENS = 512  # per response: attributes, delimiter, name, extended items
MAX_DEPTH = 8  # parentheses nested in one response
MAX_TOKEN_BYTES = 64 * 1024  # one atom, string or literal (names are capped far below)

_TOKEN = re.compile(
    rb' *(?:(\()|(\))|"((?:[^"\\\r\n]|\\["\\])*)"|([^\x00-\x20()"{}\x7f]+))',
)
_LITERAL_MARK = re.compile(rb" *\{([0-9]+)\+?\}\Z")
_UNESCAPE = re.compile(rb'\\(["\\])')
_OBJECTID = re.compile(r"[A-Za-z0-9_-]{1,255}\Z")
_MODIFIED_B64 = re.compile(rb"[A-Za-z0-9+,]*\Z")

UINT32_MAX = 2**32 - 1
MODSEQ_MAX = 2**63 - 1


class Atom(bytes):
    """A bare word (``NIL``, ``\\HasChildren``, a number), as opposed to a string."""


Token = bytes | Atom | str  # "(" and ")" are the str tokens


@dataclass(frozen=True, slots=True)
class ListEntry:
    attributes: tuple[str, ...]
    delimiter: str | None
    name: bytes  # as sent: modified UTF-7, or whatever a literal held


@dataclass(frozen=True, slots=True)
class StatusEntry:
    name: bytes
    items: dict[str, int | str]


class _Malformed(Exception):
    """The response does not have the shape it must have."""


def responses(data: Sequence[Any]) -> Iterator[list[Token] | None]:
    """Each response of imaplib's untagged data, as tokens (None: malformed)."""
    pieces: list[tuple[bytes, bytes | None]] = []
    for item in data:
        if item is None:
            continue
        if type(item) is tuple and len(item) == 2:
            text, literal = item
            if type(text) is not bytes or type(literal) is not bytes:
                yield None
                pieces = []
                continue
            pieces.append((text, literal))
            continue
        if type(item) is not bytes:
            yield None
            pieces = []
            continue
        pieces.append((item, None))
        try:
            yield _tokens(pieces)
        except _Malformed:
            yield None
        pieces = []
    if pieces:
        yield None  # a literal whose line never ended


def _tokens(pieces: list[tuple[bytes, bytes | None]]) -> list[Token]:
    out: list[Token] = []
    depth = 0
    for text, literal in pieces:
        words = text
        if literal is not None:
            mark = _LITERAL_MARK.search(text)
            if mark is None or int(mark[1]) != len(literal) or len(literal) > MAX_TOKEN_BYTES:
                raise _Malformed
            words = text[: mark.start()]
        depth = _scan(words, out, depth)
        if literal is not None:
            out.append(bytes(literal))
    if depth != 0 or len(out) > MAX_TOKENS:
        raise _Malformed
    return out


def _scan(text: bytes, out: list[Token], depth: int) -> int:
    """Append the tokens of ``text`` to ``out``; the parenthesis depth after them."""
    pos = 0
    while pos < len(text) and text[pos:].strip(b" "):
        m = _TOKEN.match(text, pos)
        if m is None or len(out) >= MAX_TOKENS:
            raise _Malformed
        pos = m.end()
        if m[1] or m[2]:
            depth += 1 if m[1] else -1
            if not 0 <= depth <= MAX_DEPTH:
                raise _Malformed
            out.append("(" if m[1] else ")")
            continue
        token = _UNESCAPE.sub(rb"\1", m[3]) if m[3] is not None else Atom(m[4])
        if len(token) > MAX_TOKEN_BYTES:
            raise _Malformed
        out.append(token)
    return depth


def list_entry(tokens: list[Token]) -> ListEntry | None:  # noqa: PLR0911
    """``(attributes) delimiter name [extended]`` or None."""
    if len(tokens) < 4 or tokens[0] != "(":
        return None
    try:
        close = tokens.index(")")
    except ValueError:
        return None
    attributes = [a for a in tokens[1:close] if isinstance(a, Atom)]
    if len(attributes) != close - 1:
        return None
    rest = tokens[close + 1 :]
    if len(rest) < 2:
        return None
    delim_token, name = rest[0], rest[1]
    if isinstance(delim_token, Atom):
        if delim_token.upper() != b"NIL":
            return None
        delimiter = None
    elif isinstance(delim_token, bytes) and len(delim_token) == 1 and 0x20 < delim_token[0] < 0x7F:
        delimiter = delim_token.decode("ascii")
    else:
        return None
    if isinstance(name, str) or name == b"":
        return None
    extended = rest[2:]
    if extended and (extended[0] != "(" or extended[-1] != ")"):
        return None
    return ListEntry(tuple(bytes(a).decode("ascii") for a in attributes), delimiter, bytes(name))


def status_entry(tokens: list[Token]) -> StatusEntry | None:
    """``name (ITEM value ...)`` or None; items whose value is unusable are left out."""
    if len(tokens) < 3 or isinstance(tokens[0], str) or tokens[1] != "(" or tokens[-1] != ")":
        return None
    items: dict[str, int | str] = {}
    body = tokens[2:-1]
    i = 0
    while i < len(body):
        key = body[i]
        if not isinstance(key, Atom) or i + 1 >= len(body):
            return None
        value = body[i + 1]
        name = key.decode("ascii").upper()
        i += 2
        if value == "(":
            if i + 1 >= len(body) or body[i + 1] != ")":
                return None
            inner, i = body[i], i + 2
            if name == "MAILBOXID" and isinstance(inner, bytes) and not isinstance(inner, str):
                text = bytes(inner).decode("ascii", "replace")
                if _OBJECTID.match(text):
                    items[name] = text
            continue
        if isinstance(value, Atom) and value.isdigit() and len(value) <= 20:
            items[name] = int(value)
        elif isinstance(value, str):
            return None
    return StatusEntry(bytes(tokens[0]), items)


def decode_name(raw: bytes) -> str | None:
    """A modified UTF-7 name decoded, or None when it is not valid modified UTF-7."""
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if not 0x20 <= c <= 0x7E:
            return None
        if c != 0x26:  # "&"
            out.append(chr(c))
            i += 1
            continue
        end = raw.find(b"-", i + 1)
        if end < 0:
            return None
        run = raw[i + 1 : end]
        i = end + 1
        if not run:
            out.append("&")
            continue
        text = _decode_run(run)
        if text is None:
            return None
        out.append(text)
    return "".join(out)


def _decode_run(run: bytes) -> str | None:
    if not _MODIFIED_B64.match(run) or len(run) % 4 == 1:
        return None
    padded = run.replace(b",", b"/") + b"=" * (-len(run) % 4)
    try:
        utf16 = base64.b64decode(padded, validate=True)
        if len(utf16) % 2:
            return None
        text = utf16.decode("utf-16-be")
    except (binascii.Error, UnicodeDecodeError):
        return None
    if any(0x20 <= ord(ch) <= 0x7E for ch in text):
        return None  # printable ASCII must stand for itself
    return text


def status_number(value: int | str | None, *, low: int, high: int) -> int | None:
    """A STATUS number within its RFC range, else None."""
    if isinstance(value, int) and low <= value <= high:
        return value
    return None
