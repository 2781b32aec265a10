"""Header values as text, and address lists read quickly where they are plain."""

from __future__ import annotations

import re
from email.header import decode_header
from email.utils import getaddresses

from application.mail.parsing import MAX_ADDRESSES, MAX_HEADER_CHARS, Address
from infrastructure.mime.charsets import CONTROL, decode_text, storable

_FOLD = re.compile(r"\r?\n(?=[ \t])")
_ADDR = r"[^<>\s@\",;:()\\]+@[^<>\s@\",;:()\\]+"
# The name is an atomic group: a lazy one would retry every split of a long run of
# spaces before "<" (quadratic); names are stripped by the caller.
_SIMPLE_ADDRESS = re.compile(
    rf'\s*(?:(?:"([^"\\]*)"|(?>([^<>@,";:\\()]*)))\s*<({_ADDR})>|({_ADDR}))\s*(?:,|$)'
)


class HeaderText:
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
            return CONTROL.sub("", value) if CONTROL.search(value) else value
        value = self._recover_8bit(value)
        return storable(CONTROL.sub("", value), self._defects)

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
                out.append(decode_text(chunk, charset, self._defects))
        return storable(CONTROL.sub("", "".join(out)), self._defects)


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
