"""A recipient as ``send-message`` takes it: a bare address, or an address with a display
name (``Name <addr>`` or ``"Name" <addr>``, RFC 5322's name-addr).

Strict on purpose: the name is the caller's text and we do its encoding (``compose``
writes it quoted, or as RFC 2047 encoded words where it is not ASCII), so a name
with CR, LF or another control character, an unquoted special (``, ; < > @ : " ( ) [ ]
\\``), an encoded word of its own (``=?``: decoded by the reader, it could show another
address than the one mail goes to), more than ``MAX_NAME`` characters, or an address
that is not one plain ``local@domain`` is refused (400 at the boundary).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

MAX_NAME = 200
MAX_ADDRESS = 320
MAX_RECIPIENT = MAX_NAME * 2 + MAX_ADDRESS + 8  # a quoted name may escape every character
ADDRESS = re.compile(r"^[^@\s<>,;\"()\[\]\\:]+@[^@\s<>,;\"()\[\]\\:]+$")
_SPECIALS = frozenset(',;<>@:"()[]\\')


@dataclass(frozen=True)
class Mailbox:
    address: str
    name: str = ""


def parse_mailbox(value: str) -> Mailbox:
    """The recipient ``value`` names; ``ValueError`` saying why it is refused."""
    if "\r" in value or "\n" in value:
        raise ValueError("CR and LF are not allowed in a recipient")
    text = value.strip()
    if len(text) > MAX_RECIPIENT:
        raise ValueError("the recipient is too long")
    if "<" not in text:
        return Mailbox(_address(text))
    if not text.endswith(">"):
        raise ValueError("expected an address, or a name and <address>")
    phrase, _, inner = text[:-1].rpartition("<")
    name = phrase.strip()
    name = _unquoted(name) if name.startswith('"') else _plain(name)
    return Mailbox(_address(inner.strip()), _checked_name(name))


def _address(text: str) -> str:
    if len(text) > MAX_ADDRESS or not ADDRESS.match(text):
        raise ValueError("not a plain address (local@domain)")
    return text


def _plain(name: str) -> str:
    if not _SPECIALS.isdisjoint(name):
        raise ValueError("a display name with special characters must be quoted")
    return " ".join(name.split())


def _unquoted(name: str) -> str:
    if len(name) < 2 or not name.endswith('"'):
        raise ValueError("an unterminated quoted display name")
    out: list[str] = []
    escaped = False
    for ch in name[1:-1]:
        if escaped:
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            raise ValueError("a quote inside a quoted display name must be escaped")
        else:
            out.append(ch)
    if escaped:
        raise ValueError("a quoted display name ends in a backslash")
    return "".join(out)


def _checked_name(name: str) -> str:
    if len(name) > MAX_NAME:
        raise ValueError(f"a display name has at most {MAX_NAME} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in name):
        raise ValueError("control characters are not allowed in a display name")
    if "=?" in name:
        raise ValueError("a display name may not hold an encoded word (=?...?=)")
    return name
