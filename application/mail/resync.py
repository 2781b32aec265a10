"""QRESYNC (RFC 7162) on the poll's session: one ``EXAMINE folder (QRESYNC (uidvalidity
modseq))`` answers a changed folder's status, the UIDs expunged since ``modseq``
(``VANISHED (EARLIER)``) and the flags changed since it, in one exchange, where the
poll otherwise sends EXAMINE + ``UID FETCH (CHANGEDSINCE)`` + EXAMINE + ``UID SEARCH
ALL``. The values here; the command and its parsing are the IMAP adapter's
(``infrastructure.imap.qresync``).

What is believed: a VANISHED answer whose ranges are well formed, at most
``MAX_RANGES`` of them, every UID below UIDNEXT, and none also named by a FETCH line of
the same answer (a UID cannot be both gone and changed). The membership pass then
checks the count (``most_gone``): the mapped rows it would drop cannot outnumber what
MESSAGES and UIDNEXT allow to have left. An answer not believed is replaced by
``UID SEARCH ALL`` for that folder, in the same pass.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from application.mail.ports import MailboxStatus
from domain.message_flags import FlagSet

MAX_RANGES = 100_000  # past this a VANISHED answer is not believed (the SEARCH instead)


@dataclass(frozen=True, slots=True)
class UidRanges:
    """Sorted, merged, inclusive UID ranges."""

    ranges: tuple[tuple[int, int], ...] = ()
    _starts: tuple[int, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def of(cls, ranges: list[tuple[int, int]]) -> UidRanges:
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(ranges):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        return cls(tuple(merged), tuple(lo for lo, _ in merged))

    def __contains__(self, uid: object) -> bool:
        if not isinstance(uid, int):
            return False
        i = bisect_right(self._starts, uid) - 1
        return i >= 0 and uid <= self.ranges[i][1]

    @property
    def highest(self) -> int:
        return self.ranges[-1][1] if self.ranges else 0


@dataclass(frozen=True, slots=True)
class Resynced:
    """One QRESYNC EXAMINE's answer, bounded (the folder stays selected)."""

    status: MailboxStatus
    vanished: UidRanges | None  # None: not believed
    flags: Mapping[int, FlagSet]  # by UID, changed since the modseq asked
    stale_modseqs: bool = False  # a FETCH line at or below the modseq asked
    unread: int = 0  # lines not believed


@dataclass(frozen=True, slots=True)
class Vanished:
    """What the membership pass takes of a believed VANISHED answer."""

    uidvalidity: int
    uids: UidRanges
    most_gone: int  # how many mapped rows may leave at most (MESSAGES and UIDNEXT say)


@runtime_checkable
class ResyncSession(Protocol):
    """A poll's session that may have QRESYNC enabled (``ImapMailboxSession``)."""

    def resync(self, folder: str, uidvalidity: int, modseq: int) -> Resynced | None:
        """``EXAMINE folder (QRESYNC (uidvalidity modseq))``; None unless QRESYNC was
        enabled on this session (raises ``MailProviderError``)."""
        ...
