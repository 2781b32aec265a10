"""A message's IMAP flags as the store keeps them: bounded, canonical, comparable.

Invariants of a ``FlagSet``: sorted and without duplicates (so two equal sets are equal
tuples and "changed" is a plain comparison); system flags (``\\Seen``, ``\\Flagged``,
``\\Answered``, ``\\Deleted``, ``\\Draft``) always kept, ``\\Recent`` never (it belongs to
one session, not to the message); at most ``MAX_KEYWORDS`` keywords, each an IMAP atom of
at most ``MAX_KEYWORD_BYTES`` bytes of printable ASCII. Everything else is dropped and
counted, never stored, so a hostile server costs bytes, not storage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MAX_KEYWORDS = 50
MAX_KEYWORD_BYTES = 64
SEEN = "\\Seen"
FLAGGED = "\\Flagged"
SYSTEM_FLAGS = frozenset({SEEN, FLAGGED, "\\Answered", "\\Deleted", "\\Draft"})
_ATOM_SPECIALS = frozenset('(){ %*"\\]')


@dataclass(frozen=True, slots=True)
class FlagSet:
    flags: tuple[str, ...]
    dropped: int = 0  # flags of the server's answer left out (bounds, shape, \Recent)

    @property
    def unread(self) -> bool:
        return SEEN not in self.flags

    @property
    def flagged(self) -> bool:
        return FLAGGED in self.flags


def bounded_flags(raw: Iterable[str]) -> FlagSet:
    """The flags of ``raw`` (a server's answer, untrusted) within the bounds above."""
    system: set[str] = set()
    keywords: set[str] = set()
    dropped = 0
    for flag in raw:
        canonical = _system(flag)
        if canonical is not None:
            system.add(canonical)
        elif flag.lower() == "\\recent":
            dropped += 1
        elif _keyword(flag) and (flag in keywords or len(keywords) < MAX_KEYWORDS):
            keywords.add(flag)
        else:
            dropped += 1
    return FlagSet(tuple(sorted(system | keywords)), dropped)


def _system(flag: str) -> str | None:
    """The canonical spelling of a system flag (IMAP flags are case-insensitive)."""
    lowered = flag.lower()
    for name in SYSTEM_FLAGS:
        if name.lower() == lowered:
            return name
    return None


def _keyword(flag: str) -> bool:
    """An atom of printable ASCII, within the size bound (no other ``\\`` flags)."""
    if not flag or len(flag) > MAX_KEYWORD_BYTES or flag.startswith("\\"):
        return False
    return all("!" <= c <= "~" and c not in _ATOM_SPECIALS for c in flag)
