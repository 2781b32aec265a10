"""Which folders an account syncs, and how a new LIST answer matches the folders known. Pure.

The ``folders`` setting of an account (``FolderSelection``):

- ``special`` (the default): INBOX and the folders with a special-use role that holds
  mail people read or wrote (sent, archive, drafts, junk, trash). Where the server has an
  ``\\All`` folder (Gmail), every message is in it and labels are folders: then ``\\All``,
  junk and trash (which ``\\All`` leaves out), INBOX for its push, and ``\\Sent`` (its
  page makes a message outbound, and its name is what the ``\\Sent`` label means), but
  no other label's folder: the labels come with All Mail's messages.
- ``all``: every selectable folder.
- a list of names: INBOX and those names, as far as the server has them.

A folder is never synced when it is not selectable (``\\Noselect``, ``\\NonExistent``).

Identity (``match_listing``), first rule that applies:

1. A listing without INBOX is not believed (a server's bad moment: a real mailbox always
   has INBOX): nothing is gone, nothing new (``FolderChanges.suspect``).
2. Same MAILBOXID = same folder, whatever its name now (a rename), when the id is unique
   in the listing. Its UIDVALIDITY, when LIST-STATUS told it and it differs from the
   one known, means a reset: the folder's cursor is void.
3. Otherwise the same name (INBOX in any case) = the same folder, unless both sides carry
   a MAILBOXID and they differ (then it is another folder under the old name). A
   different UIDVALIDITY is a reset, as above.
4. A known folder matched by nothing is gone; a listed folder matched by nothing is new.

Without MAILBOXID a rename is a folder gone and a folder new: its messages are found
again in the new folder by their own identity (moves), not by the folder's.

Invariants (tested with hypothesis): every known folder is in exactly one of
``unchanged``, ``renamed``, ``reset`` or ``gone``; every listed folder in exactly one of
``unchanged``, ``renamed``, ``reset`` or ``added``; a listing matched against itself
changes nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from application.mail.folder_listing import Folder, FolderRole

SPECIAL_ROLES: frozenset[FolderRole] = frozenset({"sent", "archive", "drafts", "junk", "trash"})
GMAIL_ROLES: frozenset[FolderRole] = frozenset({"all", "sent", "junk", "trash"})
MAX_SELECTED_NAMES = 100
MAX_NAME_CHARS = 1024


class FolderSettingInvalid(ValueError):
    """The ``folders`` setting is not ``special``, ``all`` or a list of folder names."""


@dataclass(frozen=True, slots=True)
class FolderSelection:
    mode: Literal["special", "all", "names"] = "special"
    names: tuple[str, ...] = ()


def folder_setting_value(selection: FolderSelection) -> str | list[str]:
    """The setting as an account's event stores it (``parse_folder_setting`` reads it)."""
    return list(selection.names) if selection.mode == "names" else selection.mode


def parse_folder_setting(value: object) -> FolderSelection:
    """``special`` | ``all`` | a list of 1 to 100 names (each 1 to 1024 characters, no
    control characters); None is the default, ``special``."""
    if value is None or value == "special":
        return FolderSelection("special")
    if value == "all":
        return FolderSelection("all")
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= MAX_SELECTED_NAMES:
        raise FolderSettingInvalid("folders is 'special', 'all' or a list of 1 to 100 names")
    names: list[str] = []
    for name in value:
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_CHARS:
            raise FolderSettingInvalid("a folder name is a string of 1 to 1024 characters")
        if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in name):
            raise FolderSettingInvalid("a folder name holds no control characters")
        canonical = "INBOX" if name.upper() == "INBOX" else name
        if canonical not in names:
            names.append(canonical)
    return FolderSelection("names", tuple(names))


@dataclass(frozen=True, slots=True)
class FoldersToSync:
    folders: tuple[Folder, ...]
    missing: tuple[str, ...] = ()
    """Names the setting asks for that the server does not list (selectable)."""


def folders_to_sync(listing: Sequence[Folder], selection: FolderSelection) -> FoldersToSync:
    """The listed folders the account syncs, in the listing's order."""
    selectable = [f for f in listing if f.selectable]
    if selection.mode == "all":
        return FoldersToSync(tuple(selectable))
    if selection.mode == "names":
        wanted = {"INBOX", *selection.names}
        chosen = tuple(f for f in selectable if f.name in wanted)
        present = {f.name for f in chosen}
        return FoldersToSync(chosen, tuple(n for n in selection.names if n not in present))
    gmail = any(f.role == "all" for f in selectable)
    roles = GMAIL_ROLES if gmail else SPECIAL_ROLES
    return FoldersToSync(
        tuple(
            f for f in selectable if f.name == "INBOX" or (f.role is not None and f.role in roles)
        )
    )


@dataclass(frozen=True, slots=True)
class KnownFolder:
    """A folder as the account's sync state remembers it."""

    name: str
    uidvalidity: int | None = None
    mailbox_id: str | None = None


@dataclass(frozen=True, slots=True)
class FolderChanges:
    unchanged: tuple[tuple[KnownFolder, Folder], ...] = ()
    renamed: tuple[tuple[KnownFolder, Folder], ...] = ()
    """Same MAILBOXID under a new name: the folder, its cursor and its messages stay."""
    reset: tuple[tuple[KnownFolder, Folder], ...] = ()
    """Same folder, new UIDVALIDITY: its cursor is void (messages re-found by identity)."""
    added: tuple[Folder, ...] = ()
    gone: tuple[KnownFolder, ...] = ()
    suspect: bool = False
    """The listing was not believed (no INBOX): nothing else is set."""
    notes: tuple[str, ...] = field(default=())
    """What was odd and how it was read, e.g. ``duplicate_mailbox_id``."""


def match_listing(known: Sequence[KnownFolder], listed: Sequence[Folder]) -> FolderChanges:
    """How ``listed`` (a new LIST answer) maps onto the ``known`` folders (see above)."""
    if not any(f.name.upper() == "INBOX" for f in listed):
        return FolderChanges(suspect=True)
    listed_ids: Counter[str] = Counter(f.mailbox_id for f in listed if f.mailbox_id)
    known_ids: Counter[str] = Counter(k.mailbox_id for k in known if k.mailbox_id)
    duplicated = any(n > 1 for n in (*listed_ids.values(), *known_ids.values()))
    pairs, unmatched = _pair(known, listed, listed_ids, known_ids)
    paired = {id(k) for k, _ in pairs}
    unchanged, renamed, reset = [], [], []
    for known_folder, folder in pairs:
        validity = folder.status.uidvalidity if folder.status else None
        if known_folder.uidvalidity is not None and validity not in (
            None,
            known_folder.uidvalidity,
        ):
            reset.append((known_folder, folder))
        elif _key(known_folder.name) != _key(folder.name):
            renamed.append((known_folder, folder))
        else:
            unchanged.append((known_folder, folder))
    return FolderChanges(
        unchanged=tuple(unchanged),
        renamed=tuple(renamed),
        reset=tuple(reset),
        added=tuple(unmatched),
        gone=tuple(k for k in known if id(k) not in paired),
        notes=("duplicate_mailbox_id",) if duplicated else (),
    )


def _pair(
    known: Sequence[KnownFolder],
    listed: Sequence[Folder],
    listed_ids: Counter[str],
    known_ids: Counter[str],
) -> tuple[list[tuple[KnownFolder, Folder]], list[Folder]]:
    """Known and listed folders paired by a unique MAILBOXID, else by name (rules 2, 3);
    the listed folders left unpaired."""
    by_id = {k.mailbox_id: k for k in known if k.mailbox_id and known_ids[k.mailbox_id] == 1}
    by_name = {_key(k.name): k for k in known}
    pairs: list[tuple[KnownFolder, Folder]] = []
    taken: set[int] = set()
    unmatched: list[Folder] = []
    for folder in listed:
        mid = (
            folder.mailbox_id if folder.mailbox_id and listed_ids[folder.mailbox_id] == 1 else None
        )
        match = by_id.get(mid) if mid else None
        if match is None:
            candidate = by_name.get(_key(folder.name))
            other_id = (
                candidate is not None
                and candidate.mailbox_id
                and mid
                and candidate.mailbox_id != mid
            )
            match = None if other_id else candidate
        if match is None or id(match) in taken:
            unmatched.append(folder)
            continue
        taken.add(id(match))
        pairs.append((match, folder))
    return pairs, unmatched


def known_from(folder: Folder) -> KnownFolder:
    """What the sync state keeps of a listed folder."""
    validity = folder.status.uidvalidity if folder.status else None
    return KnownFolder(name=folder.name, uidvalidity=validity, mailbox_id=folder.mailbox_id)


def _key(name: str) -> str:
    return "INBOX" if name.upper() == "INBOX" else name
