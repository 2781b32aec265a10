"""Gmail's IMAP extension (X-GM-EXT-1) for the simulator (``bench/imap_sim.py``): labels
are folders, and one message is in every folder of its labels with one X-GM-MSGID.

State (per Gmail mailbox, ``GmailFolders``): one ``Label`` set per message identity,
shared by that message's copies (``Message`` objects, each with its own UID) in the
folders. Invariants: a message is in the folder of each of its labels (INBOX for
``\\Inbox``, ``[Gmail]/Sent Mail`` for ``\\Sent``, ``[Gmail]/Trash`` for ``\\Trash``,
``[Gmail]/Spam`` for ``\\Spam``, a user label's own folder), and in ``[Gmail]/All Mail``
unless it is in Trash or Spam; a copy's UID is never reused in its folder. X-GM-MSGID
and X-GM-THRID are 64-bit numbers, the same in every folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

ALL_MAIL = "[Gmail]/All Mail"
# name -> (LIST attributes, the label that puts a message in it; None: All Mail's rule)
SYSTEM_FOLDERS: dict[str, tuple[bytes, bytes | None]] = {
    "INBOX": (b"\\HasNoChildren", b"\\Inbox"),
    "[Gmail]": (b"\\HasChildren \\Noselect", None),
    ALL_MAIL: (b"\\All \\HasNoChildren", None),
    "[Gmail]/Sent Mail": (b"\\HasNoChildren \\Sent", b"\\Sent"),
    "[Gmail]/Trash": (b"\\HasNoChildren \\Trash", b"\\Trash"),
    "[Gmail]/Spam": (b"\\HasNoChildren \\Junk", b"\\Spam"),
}
OUT_OF_ALL_MAIL = frozenset({b"\\Trash", b"\\Spam"})
MAX_LABELS = 100  # per message; a STORE past it is refused
_LABEL = re.compile(rb'"((?:[^"\\]|\\.)*)"|([^\s()"]+)')
# Printable ASCII, 1-255 bytes, no quote or backslash but a system label's leading one:
# a label becomes a folder name in LIST answers, written between quotes.
_PLAIN_LABEL = re.compile(rb"\\?[\x20\x21\x23-\x5b\x5d-\x7e]{1,254}\Z")
FIRST_MSGID = 1_700_000_000_000_000_000  # Gmail's ids are 64-bit; above 2^53 on purpose


@dataclass(slots=True)
class Identity:
    msgid: int
    thrid: int
    labels: set[bytes] = field(default_factory=set)


def folder_of(label: bytes) -> str:
    for name, (_, owner) in SYSTEM_FOLDERS.items():
        if owner == label:
            return name
    return label.decode(errors="replace")


def in_folder(identity: Identity, folder: str) -> bool:
    if folder == ALL_MAIL:
        return not identity.labels & OUT_OF_ALL_MAIL
    return any(folder_of(label) == folder for label in identity.labels)


def parse_labels(text: bytes) -> list[bytes] | None:
    """A STORE's label list, ``(\\Inbox "My label" Work)``; None if it is not one."""
    text = text.strip()
    if not (text.startswith(b"(") and text.endswith(b")")):
        return None
    labels = [
        m[1].replace(b'\\"', b'"').replace(b"\\\\", b"\\") if m[1] is not None else m[2]
        for m in _LABEL.finditer(text[1:-1])
    ]
    if len(labels) > MAX_LABELS or not all(_PLAIN_LABEL.match(label) for label in labels):
        return None
    return labels


def render_labels(labels: set[bytes]) -> bytes:
    """X-GM-LABELS as Gmail sends it: system labels as atoms, user labels quoted."""
    out = []
    for label in sorted(labels):
        if label.startswith(b"\\"):
            out.append(label)
        else:
            out.append(b'"' + label.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"')
    return b"(" + b" ".join(out) + b")"


def list_lines(user_labels: list[str]) -> list[bytes]:
    lines = [
        b'(%s) "/" "%s"' % (attributes, name.encode())
        for name, (attributes, _) in SYSTEM_FOLDERS.items()
    ]
    lines += [b'(\\HasNoChildren) "/" "%s"' % name.encode() for name in user_labels]
    return lines


class GmailFolders:
    """The folders of one Gmail mailbox: ``place`` puts each copy where its labels say;
    ``make_copy`` is the simulator's (a new ``Message`` with the folder's next UID)."""

    def __init__(self, make_copy: Callable[[str, Identity], None]) -> None:
        self.make_copy = make_copy
        self.user_labels: list[str] = []
        self._next = FIRST_MSGID

    def new_identity(self, labels: set[bytes], thread_of: Identity | None = None) -> Identity:
        self._next += 1
        thrid = thread_of.thrid if thread_of is not None else self._next
        identity = Identity(self._next, thrid, set(labels))
        for label in labels:
            self._remember(label)
        return identity

    def _remember(self, label: bytes) -> None:
        name = folder_of(label)
        if name not in SYSTEM_FOLDERS and name not in self.user_labels:
            self.user_labels.append(name)

    def selectable(self, folder: str) -> bool:
        system = SYSTEM_FOLDERS.get(folder)
        return folder in self.user_labels or (system is not None and b"Noselect" not in system[0])

    def relabel(
        self,
        identity: Identity,
        add: list[bytes],
        remove: list[bytes],
        holds: Callable[[str], bool],
    ) -> None:
        """Change the labels and make the copies follow: a new copy in each folder the
        message enters (``holds(folder)`` says where a copy already is); the simulator
        drops the copies of the folders it left."""
        identity.labels |= set(add)
        identity.labels -= set(remove)
        for label in add:
            self._remember(label)
        for folder in [ALL_MAIL, *(folder_of(label) for label in identity.labels)]:
            if in_folder(identity, folder) and not holds(folder):
                self.make_copy(folder, identity)
