"""A fast stand-in for imapclient's FETCH response parser.

``parse_fetch(data, normalise_times=...)`` returns what
``imapclient.response_parser.parse_fetch_response(data, normalise_times, uid_is_key=True)``
returns for the untagged FETCH data imaplib collects (``IMAP4._untagged_response``): a
list of lines, each ``bytes`` or ``(text ending in "{size}", literal)``.

imapclient's lexer walks every byte outside literals through Python-level iterators; on
mail ingestion that is the largest CPU cost of a worker. Here one regex reads a whole
``name value`` item, and the result is built by imapclient's rules (see ``_parse``).

Read here: ``<number> (<name> <value> ...)`` for each message, several per line if need
be; names are atoms (``BODY[HEADER.FIELDS (A B)]``, ``BODY[]<0>``); values are numbers,
``NIL``, other atoms, quoted strings, literals and lists of atoms (FLAGS, EMAILID,
MODSEQ); one space between tokens. Anything else (nested lists, ENVELOPE / BODY /
BODYSTRUCTURE, an INTERNALDATE not in the canonical ``"dd-Mon-yyyy hh:mm:ss +zzzz"``
form, odd separators, garbage) goes to imapclient's own parser, so the answer, or the
error, is always imapclient's. Each such hand-over is counted (``fallback_count``).
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, tzinfo
from typing import Any

from imapclient.datetime_util import datetime_to_native
from imapclient.fixed_offset import FixedOffset
from imapclient.response_parser import parse_fetch_response

log = logging.getLogger("tidings.imap")

FetchData = dict[int, dict[bytes, Any]]

_ATOM = rb'[^\x00-\x20()%"{\[][^\x00-\x20()%"\[]*'  # a word of imapclient's lexer
_NAME = _ATOM + rb'(?:\[[^\]]*\][^\x00-\x20()%"\[]*)*'  # "[...]" may hold anything but "]"
# The next token must be where imapclient's lexer would also start one: after a space,
# a ")" or the line's end (its other separators are left to it).
_END = rb"(?=[ )]|\Z)"
_START = re.compile(rb" ?(0|[1-9][0-9]*) \(")  # a message: its number, its items' list
_CLOSE = re.compile(rb" ?\)" + _END)
_ITEM = re.compile(
    rb" ?(" + _NAME + rb") (?:"  # 1: the item's name, then its value:
    rb"(" + _ATOM + rb")"  # 2: a number, NIL or another atom
    rb'|"([^"\\]*(?:\\.[^"\\]*)*)"'  # 3: a quoted string
    rb"|\(((?:" + _ATOM + rb"(?: " + _ATOM + rb")*)?)\)"  # 4: a list of atoms, e.g. flags
    rb"|\{([0-9]+)\}\Z"  # 5: a literal, its size left by imaplib at the end of the line
    rb")" + _END,
    re.DOTALL,
)
_ATOM_VALUE, _QUOTED, _LIST, _LITERAL = range(2, 6)  # _ITEM's value groups
_UNESCAPE = re.compile(rb'\\([\\"])')  # other escapes keep their backslash, as in imapclient
_DATE = re.compile(
    rb"( ?[0-9]|[0-9]{2})-(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)-([1-9][0-9]{3}) "
    rb"([0-9]{2}):([0-9]{2}):([0-9]{2}) ([+-])([01][0-9]|2[0-3])([0-5][0-9])\Z"
)
_MONTHS = {
    m: i for i, m in enumerate(b"Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)
}
_offsets: dict[int, tzinfo] = {}
_stats = {"fallbacks": 0}


class _Unsure(Exception):
    """Something the fast path does not read with certainty: imapclient's parser decides."""


def fallback_count() -> int:
    """How many responses were handed to imapclient's parser (in this process)."""
    return _stats["fallbacks"]


def parse_fetch(data: list[Any], *, normalise_times: bool) -> FetchData:
    """imapclient's ``parse_fetch_response(data, normalise_times, uid_is_key=True)``."""
    if data == [None]:  # imaplib's "no FETCH responses"
        return {}
    try:
        return _parse(data, normalise_times)
    except Exception:  # _Unsure, or a bug here: either way imapclient's answer is the right one
        _stats["fallbacks"] += 1
        log.debug("imap.fetch_parse fallback=imapclient")
    return dict(parse_fetch_response(data, normalise_times, True))


def _parse(data: list[Any], normalise_times: bool) -> FetchData:  # noqa: C901, PLR0912
    """imaplib's lines hold ``<number> (<name> <value> ...)`` for each message; a line
    ends only after a literal's ``{size}`` (the literal comes with it). The result is
    built by the rules of imapclient's ``parse_fetch_response``."""
    out: FetchData = {}
    msg: dict[bytes, Any] | None = None  # the items of the message being read
    msg_id = 0
    for line in data:
        text, literal = line if type(line) is tuple and len(line) == 2 else (line, None)
        if type(text) is not bytes or (type(line) is tuple and type(literal) is not bytes):
            raise _Unsure
        pos, end = 0, len(text)
        while pos < end:
            if msg is None:
                m = _START.match(text, pos)
                if m is None:
                    if text[pos:].strip(b" "):
                        raise _Unsure
                    break
                msg_id = int(m[1])
                msg = {b"SEQ": msg_id}
            elif m := _ITEM.match(text, pos):
                name = m[1]
                if name.isdigit() or name == b"NIL":  # not a name to imapclient
                    raise _Unsure
                name, value = name.upper(), _value(m, literal)
                if m.lastindex == _LITERAL:
                    literal = None  # taken
                if name == b"UID":
                    if type(value) is not int:
                        raise _Unsure
                    msg_id = value  # keyed by UID; imapclient then drops the UID item
                elif name == b"INTERNALDATE":
                    msg[name] = _internaldate(value, normalise_times)
                elif name in (b"ENVELOPE", b"BODY", b"BODYSTRUCTURE"):
                    raise _Unsure  # imapclient builds objects for these: not needed here
                else:
                    msg[name] = value
            elif m := _CLOSE.match(text, pos):
                out.setdefault(msg_id, {}).update(msg)  # repeated responses merge
                msg = None
            else:
                raise _Unsure
            pos = m.end()
        if literal is not None:  # a literal no item asked for
            raise _Unsure
    if msg is not None:  # a message left open
        raise _Unsure
    return out


def _value(m: re.Match[bytes], literal: bytes | None) -> Any:
    kind = m.lastindex
    if kind == _LITERAL:
        if literal is None or len(literal) != int(m[_LITERAL]):
            raise _Unsure
        return literal
    if kind == _ATOM_VALUE:
        return _atom(m[kind])
    if kind == _QUOTED:
        return _UNESCAPE.sub(rb"\1", m[kind]) if b"\\" in m[kind] else m[kind]
    return tuple(_atom(a) for a in m[_LIST].split(b" ")) if m[_LIST] else ()


def _atom(word: bytes) -> int | bytes | None:
    if word.isdigit() and (word[:1] != b"0" or len(word) == 1):
        return int(word)  # imapclient keeps "0123" as bytes
    return None if word == b"NIL" else word


def _internaldate(value: Any, normalise: bool) -> datetime:
    """imapclient's ``parse_to_datetime`` for the canonical form (email.utils is slow)."""
    m = _DATE.match(value) if type(value) is bytes else None
    if m is None:
        raise _Unsure
    day, month, year, hour, minute, second, sign, tz_hours, tz_minutes = m.groups()
    offset = int(tz_hours) * 3600 + int(tz_minutes) * 60
    tz = _offset(-offset if sign == b"-" else offset)  # "-0000" too: email.utils makes it 0
    try:
        when = datetime(
            int(year), _MONTHS[month], int(day), int(hour), int(minute), int(second), tzinfo=tz
        )
    except ValueError:
        raise _Unsure from None  # imapclient answers None: let it
    return datetime_to_native(when) if normalise else when


def _offset(seconds: int) -> tzinfo:
    tz = _offsets.get(seconds)
    if tz is None:
        tz = _offsets[seconds] = FixedOffset(seconds / 60)
    return tz
