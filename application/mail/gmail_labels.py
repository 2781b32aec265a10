"""Gmail's labels as a message's folders (X-GM-EXT-1), pure but for the reader port.

On Gmail every message is in All Mail (``\\All``) but those in Trash and Spam, and its
labels are the folders it shows in: the membership pass reads All Mail's UIDs with
their ``X-GM-LABELS`` (``LabelReader.folder_labels``) instead of ``UID SEARCH ALL``, and a
message's folders are the folders of its UID-map rows (All Mail among them) plus its
labels as folder names (``label_folders``):

- a system label names the synced folder of its role: ``\\Inbox`` is INBOX, ``\\Sent``
  the ``\\Sent`` folder, ``\\Draft`` drafts, ``\\Trash``/``\\Spam`` trash and junk; one
  whose folder is not synced, and the others (``\\Important``, ``\\Starred``: flags, not
  folders), are left out;
- a user label is its own name (Gmail lists a label as a folder of that name), bounded as
  keywords are: at most ``MAX_LABELS`` per message (the first in sorted order), each
  1 to ``MAX_LABEL_BYTES`` bytes of UTF-8 with no control characters (C0, DEL, C1);
  the rest is dropped and counted, never stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from application.mail.flag_state import UidEntry

MAX_LABELS = 100
MAX_LABEL_BYTES = 255
SYSTEM_LABEL_ROLES = {
    "\\inbox": "inbox",
    "\\sent": "sent",
    "\\draft": "drafts",
    "\\trash": "trash",
    "\\spam": "junk",
}


@dataclass(frozen=True, slots=True)
class FolderLabels:
    """All Mail's UIDs now, each with its labels as the server wrote them (decoded from
    modified UTF-7; None: a line that could not be read). ``uids`` None: not believed."""

    uidvalidity: int
    uids: frozenset[int] | None
    labels: Mapping[int, tuple[str, ...] | None] = field(default_factory=dict)


@runtime_checkable
class LabelReader(Protocol):
    """A logged-in Gmail session (``ImapMailboxSession`` with X-GM-EXT-1)."""

    def folder_labels(self, folder: str) -> FolderLabels | None:
        """EXAMINE ``folder`` and read every UID's ``X-GM-LABELS`` (None: the server has
        no X-GM-EXT-1; raises ``MailProviderError``)."""
        ...


@dataclass(frozen=True, slots=True)
class LabelFolders:
    folders: frozenset[str]
    dropped: int = 0


def label_folders(labels: Iterable[str], by_role: Mapping[str, str]) -> LabelFolders:
    """The folder names of ``labels`` (untrusted) within the bounds above; ``by_role``:
    the synced folders' names by role (``inbox`` -> INBOX, ``sent`` -> ...)."""
    names: set[str] = set()
    users: set[str] = set()
    dropped = 0
    for label in labels:
        role = SYSTEM_LABEL_ROLES.get(label.lower()) if label.startswith("\\") else None
        if role is not None and role in by_role:
            names.add(by_role[role])
        elif label.startswith("\\"):
            continue  # a label that is not a folder here: not counted as dropped
        elif _plain(label):
            users.add(label)
        else:
            dropped += 1
    kept = sorted(users)[:MAX_LABELS]
    return LabelFolders(frozenset(names | set(kept)), dropped + len(users) - len(kept))


def _plain(label: str) -> bool:
    try:
        size = len(label.encode("utf-8"))  # a lone surrogate does not encode
    except UnicodeEncodeError:
        return False
    if not 1 <= size <= MAX_LABEL_BYTES:
        return False
    return not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in label)


def labelled_folder(account: Any, session: object) -> tuple[str, dict[str, str]] | None:
    """Gmail's All Mail (the synced folder of role ``all``) and the synced folders' names
    by role, when ``session`` reads labels; else None."""
    if not isinstance(session, LabelReader):
        return None
    synced: Mapping[str, tuple[str, str | None]] = account.synced_folders
    by_role = {role: name for name, role in synced.values() if role is not None}
    if "all" not in by_role:
        return None
    return by_role["all"], {**by_role, "inbox": "INBOX"}


def with_labels(
    wanted: dict[UUID, set[str]],
    rows: Iterable[UidEntry],
    dropped: set[tuple[str, int]],
    labelled: tuple[str, Mapping[str, str]],
    answer: FolderLabels | None,
) -> int:
    """Add each message's labels (as folders) to its ``wanted`` folders, from its row in
    All Mail; a message whose labels are not known now (All Mail's answer not believed,
    or its line unreadable) leaves ``wanted``, so nothing is decided on a guess. The
    number of messages so held."""
    name, by_role = labelled
    now: dict[UUID, tuple[str, ...] | None] = {}  # by a row of All Mail's UIDVALIDITY now
    older: set[UUID] = set()  # a row of an older one (the map's rebuild maps it anew)
    believed = answer is not None and answer.uids is not None
    for r in rows:
        if r.folder != name or r.message_id not in wanted or (r.folder, r.uid) in dropped:
            continue
        if believed and answer is not None and r.uidvalidity == answer.uidvalidity:
            now[r.message_id] = answer.labels.get(r.uid)
        else:
            older.add(r.message_id)
    held = {m for m in older if m not in now} | {m for m, found in now.items() if found is None}
    for message_id, found in now.items():
        if found is not None:
            wanted[message_id] |= label_folders(found, by_role).folders
    for message_id in held:
        wanted.pop(message_id, None)
    return len(held)
