"""Reading FETCH answers of flags, pure: ``parse_flag_lines`` (byte lines as imaplib
collects them) and the window's sequence ranges (``window_ranges``).

A line is ``<seq> (<item> <value> ...)`` with the items ``UID n``, ``FLAGS (...)`` and
``MODSEQ (n)`` in any order, any case. A line without a UID in range, with a literal,
nested lists or anything else is not believed: it is counted (``FlagLines.unread``),
never guessed at. Flags are decoded as ASCII (other bytes become U+FFFD, which the
domain's bounds then drop) and bounded by ``domain.message_flags``; a UID answered twice
keeps its last answer (a server's later word).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from domain.message_flags import FlagSet, bounded_flags
from infrastructure.imap.identity import MODSEQ_MAX, valid_id

_LINE = re.compile(rb"([0-9]{1,10}) \((.*)\)\Z", re.DOTALL)
_ITEM = re.compile(
    rb"(?i)(UID) ([0-9]{1,10})|(FLAGS) \(([^()\x00\r\n]*)\)|(MODSEQ) \(([0-9]{1,19})\)"
)


@dataclass(frozen=True, slots=True)
class FlagEntry:
    uid: int
    flags: FlagSet
    modseq: int | None


@dataclass(frozen=True, slots=True)
class FlagLines:
    entries: dict[int, FlagEntry] = field(default_factory=dict)  # by UID
    unread: int = 0  # lines not believed


def parse_flag_lines(lines: list[Any]) -> FlagLines:
    """The entries of imaplib's untagged FETCH data (``[None]``: none)."""
    entries: dict[int, FlagEntry] = {}
    unread = 0
    for line in lines:
        if line is None:
            continue
        entry = _entry(line) if type(line) is bytes else None
        if entry is None:
            unread += 1
        else:
            entries[entry.uid] = entry
    return FlagLines(entries, unread)


def _entry(line: bytes) -> FlagEntry | None:
    m = _LINE.match(line)
    if m is None:
        return None
    items, pos = m[2], 0
    uid: int | None = None
    flags: FlagSet | None = None
    modseq: int | None = None
    while pos < len(items):
        if pos and items[pos : pos + 1] == b" ":
            pos += 1
        item = _ITEM.match(items, pos)
        if item is None:
            return None
        if item[1]:
            uid = int(item[2])
        elif item[3]:
            flags = bounded_flags(f.decode("ascii", "replace") for f in item[4].split())
        else:
            modseq = int(item[6])
        pos = item.end()
    if uid is None or not valid_id(uid) or flags is None:
        return None
    if modseq is not None and not 0 < modseq <= MODSEQ_MAX:
        return None
    return FlagEntry(uid, flags, modseq)


def window_ranges(exists: int, sweep_from: int, newest: int, sweep: int) -> tuple[str | None, int]:
    """The sequence set of one window read of a folder of ``exists`` messages: the newest
    ``newest`` plus ``sweep`` older ones from ``sweep_from`` (wrapping to 1 past the
    end); and where the next sweep starts."""
    if exists < 1:
        return None, 1
    newest_start = max(1, exists - newest + 1)
    older_end = newest_start - 1
    recent = f"{newest_start}:{exists}"
    if older_end < 1 or sweep < 1:
        return recent, 1
    start = sweep_from if 1 <= sweep_from <= older_end else 1
    end = min(older_end, start + sweep - 1)
    return f"{start}:{end},{recent}", end + 1 if end < older_end else 1
