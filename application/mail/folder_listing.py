"""What a folder list says: ``Folder`` values as the mail provider's ``FolderDiscovery``
(``ports.py``) returns them. Standard library only, no I/O.

A ``FolderListing`` is bounded by the adapter that made it: its folders are decoded,
free of control characters and capped in count; what was left out is counted by reason
in ``dropped``, never named (names are a server's text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FolderRole = Literal[
    "inbox", "sent", "archive", "drafts", "junk", "trash", "all", "flagged", "important"
]
RoleSource = Literal["server", "name"]
"""Where a folder's role came from: the server's special-use attribute (RFC 6154), or
the folder's well-known name on a server that flags nothing."""


@dataclass(frozen=True, slots=True)
class FolderStatus:
    """What LIST-STATUS (RFC 5819) said of a folder; None where the server gave nothing
    usable."""

    messages: int | None = None
    uidnext: int | None = None
    uidvalidity: int | None = None
    highestmodseq: int | None = None


@dataclass(frozen=True, slots=True)
class Folder:
    """One folder of a LIST answer, decoded and bounded (``FolderDiscovery``)."""

    name: str
    """Decoded from modified UTF-7; free of control characters; bounded by the adapter."""
    delimiter: str | None
    """The hierarchy delimiter; None for a flat namespace."""
    role: FolderRole | None = None
    role_source: RoleSource | None = None
    attributes: frozenset[str] = frozenset()
    """As the server sent them, known ones in their RFC spelling (``\\HasNoChildren``)."""
    mailbox_id: str | None = None
    """MAILBOXID (RFC 8474), where the server offers OBJECTID and LIST-STATUS."""
    status: FolderStatus | None = None
    """When LIST-STATUS answered for this folder."""

    @property
    def selectable(self) -> bool:
        lowered = {a.lower() for a in self.attributes}
        return not lowered & {"\\noselect", "\\nonexistent"}

    @property
    def depth(self) -> int:
        """Levels of the name (``a/b/c``: 3)."""
        return 1 + (self.name.count(self.delimiter) if self.delimiter else 0)


@dataclass(frozen=True, slots=True)
class FolderListing:
    """A LIST answer as the adapter kept it: the folders, and what it left out."""

    folders: tuple[Folder, ...]
    dropped: tuple[tuple[str, int], ...] = ()
    """(reason, how many folders) left out: ``over_cap``, ``name_too_long``,
    ``too_deep``, ``control_characters``, ``undecodable``, ``duplicate_name``,
    ``malformed``. Names are not kept: they may be anything a server sends."""
    unroled: int = 0
    """Folders whose claim to a role was set aside: another folder held it first, or a
    well-known name matched more than one folder."""
    special_use: bool = False
    """The server offered SPECIAL-USE: roles came from it, no name was guessed."""

    def by_name(self, name: str) -> Folder | None:
        for folder in self.folders:
            if folder.name == name:
                return folder
        return None
