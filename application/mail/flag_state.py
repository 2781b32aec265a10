"""Flags of a folder, mirrored: the values and ports between the IMAP adapter
(``FlagReader``), the flag state (``FlagStateStore``) and ``flag_mirror.FlagMirror``.

A folder's flag state is operational, like ``mailbox_state``: its ``FlagCursor`` (the
HIGHESTMODSEQ whose changes are mirrored, the window's sweep position, whether the
server's CONDSTORE is believed) and a UID map (UID -> message id and the flags last
stored for it: a cache of the message streams, written when a page is stored and when
flags are mirrored). Both are keyed by (account, folder name): INBOX and every other
synced folder (the poll mirrors each after the folder pass).

How a session reads flags (``FlagReader.read_flags``), the capability checked first:

- CONDSTORE, a cursor of the same UIDVALIDITY, believed: HIGHESTMODSEQ unchanged ->
  nothing is fetched (``unchanged``); else ``UID FETCH 1:* (UID FLAGS) (CHANGEDSINCE m)``.
  An answer carrying a MODSEQ at or below ``m`` marks the cursor ``unreliable``: from
  then on the folder is read by the window.
- CONDSTORE without a cursor (or after a UIDVALIDITY change): every message once.
- Otherwise the window: the newest ``FlagWindow.newest`` messages plus ``sweep`` older
  ones from ``sweep_from`` on, wrapping round, so every message is revisited within
  ``ceil(n / sweep)`` polls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable
from uuid import UUID

from domain.message_flags import FlagSet

INBOX = "INBOX"
ReadMode = Literal["unchanged", "changedsince", "full", "window"]


@dataclass(frozen=True, slots=True)
class FlagWindow:
    """The window of a server without CONDSTORE (sizes in docs/workers.md)."""

    newest: int = 500
    sweep: int = 2000


@dataclass(frozen=True, slots=True)
class FlagCursor:
    uidvalidity: int
    modseq: int | None = None  # changes up to here are mirrored (CONDSTORE)
    sweep_from: int = 1  # the window: the sequence number the next sweep starts at
    unreliable: bool = False  # CHANGEDSINCE answered at or below the cursor: window only


@dataclass(frozen=True, slots=True)
class FlagRead:
    """One reading of a folder's flags: what the server said, bounded."""

    uidvalidity: int
    highestmodseq: int | None
    mode: ReadMode
    flags: Mapping[int, FlagSet] = field(default_factory=dict)  # by UID
    sweep_from: int = 1  # where the next sweep starts
    stale_modseqs: bool = False  # a CHANGEDSINCE answer at or below the cursor

    @property
    def dropped(self) -> int:
        return sum(f.dropped for f in self.flags.values())


@runtime_checkable
class FlagReader(Protocol):
    """A logged-in session that reads a folder's flags (``ImapMailboxSession``)."""

    def read_flags(
        self, cursor: FlagCursor | None, window: FlagWindow, folder: str = INBOX
    ) -> FlagRead: ...


@dataclass(frozen=True, slots=True)
class UidEntry:
    account_id: str
    folder: str
    uidvalidity: int
    uid: int
    message_id: UUID
    flags: tuple[str, ...] | None  # None: not known (compare with the stream)


class FlagStateStore(Protocol):
    def remember(self, entries: Sequence[UidEntry]) -> None:
        """Upsert the entries (any accounts) in one write."""
        ...

    def known(
        self, account_id: str, folder: str, uidvalidity: int, uids: Iterable[int]
    ) -> dict[int, UidEntry]:
        """The entries of these UIDs under ``uidvalidity`` (others are not known)."""
        ...

    def mapped(self, account_id: str) -> list[UidEntry]:
        """Every entry of the account (the membership pass reads the map whole)."""
        ...

    def drop(self, entries: Sequence[UidEntry]) -> None:
        """Remove these entries (UIDs the server expunged), in one write."""
        ...

    def cursor(self, account_id: str, folder: str) -> FlagCursor | None: ...

    def claim(self, account_id: str, folder: str, token: str, *, now: float, until: float) -> bool:
        """Claim the folder's flag pass for ``token`` until ``until`` (unix seconds): True
        unless another token holds a claim unexpired at ``now``."""
        ...

    def release(self, account_id: str, folder: str, token: str) -> None:
        """End ``token``'s claim (nothing when another holds it now)."""
        ...

    def save(
        self, account_id: str, folder: str, cursor: FlagCursor, entries: Sequence[UidEntry]
    ) -> None:
        """The cursor and the entries mirrored with it, in one write."""
        ...

    def forget(self, account_id: str) -> None: ...
