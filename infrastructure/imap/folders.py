"""Folder discovery: which LIST to send, and its answer made into ``FolderListing``. Pure
but for ``list_folders`` (one operation through the session's ``Connection``).

The command is chosen from the capabilities before the round trip:

- ``LIST "" "*"`` always; ``RETURN (...)`` only where LIST-EXTENDED or LIST-STATUS is
  offered: ``SPECIAL-USE`` with SPECIAL-USE (RFC 6154), ``STATUS (MESSAGES UIDNEXT
  UIDVALIDITY [HIGHESTMODSEQ] [MAILBOXID])`` with LIST-STATUS (RFC 5819), HIGHESTMODSEQ
  with CONDSTORE, MAILBOXID with OBJECTID (RFC 8474). A server that then refuses
  ``RETURN`` (NO or BAD) gets a plain LIST, in the same operation.

Roles:

- INBOX (any case) is ``inbox``. A special-use attribute (``\\Sent``, ``\\Archive``,
  ``\\Drafts``, ``\\Junk``, ``\\Trash``, ``\\All``, ``\\Flagged``, ``\\Important``; and
  ``\\Spam``, which some servers send for ``\\Junk``) gives its role, source ``server``:
  the server's word always wins over a name.
- Only where the server offers no SPECIAL-USE, a well-known name gives a role, source
  ``name``: at the top level or right under INBOX (``INBOX.Sent``), or Gmail's
  ``[Gmail]/...`` and ``[Google Mail]/...``; never deeper (``Projects/Sent`` is a
  project's folder). A role no server attribute claimed, and only when exactly one folder's
  name claims it (two candidates, ``Junk`` and ``Spam``: neither).
- One folder per role: the first the server listed keeps it; later claims are set aside
  (``unroled``) and keep their attributes.

Bounds (a server's answer is data): at most ``max_folders`` folders are kept — INBOX and
the folders with a role first, then in the server's order — and folders are left out,
counted by reason, for a raw name over ``MAX_NAME_BYTES``, more than ``MAX_DEPTH``
levels, a name that is not modified UTF-7, control characters in the decoded name, a
name listed twice, or a response of the wrong shape.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from imapclient.exceptions import IMAPClientAbortError, IMAPClientError

from application.mail.folder_listing import Folder, FolderListing, FolderRole, FolderStatus
from infrastructure.imap import list_response as lr
from infrastructure.imap import wire
from infrastructure.imap.connection import Connection

MAX_NAME_BYTES = 1024
MAX_DEPTH = 64
MAX_ATTRIBUTES = 32
DEFAULT_MAX_FOLDERS = 1000

_SPECIAL_USE: dict[str, FolderRole] = {
    "\\sent": "sent",
    "\\archive": "archive",
    "\\drafts": "drafts",
    "\\junk": "junk",
    "\\spam": "junk",
    "\\trash": "trash",
    "\\all": "all",
    "\\flagged": "flagged",
    "\\important": "important",
}
_KNOWN_ATTRIBUTES = {
    a.lower(): a
    for a in (
        "\\Noselect",
        "\\NonExistent",
        "\\Noinferiors",
        "\\HasChildren",
        "\\HasNoChildren",
        "\\Marked",
        "\\Unmarked",
        "\\Subscribed",
        "\\Remote",
        "\\Sent",
        "\\Archive",
        "\\Drafts",
        "\\Junk",
        "\\Trash",
        "\\All",
        "\\Flagged",
        "\\Important",
    )
}
_WELL_KNOWN: dict[str, FolderRole] = {
    "sent": "sent",
    "sent items": "sent",
    "sent messages": "sent",
    "sent mail": "sent",
    "archive": "archive",
    "archives": "archive",
    "drafts": "drafts",
    "draft": "drafts",
    "junk": "junk",
    "spam": "junk",
    "junk e-mail": "junk",
    "junk email": "junk",
    "bulk mail": "junk",
    "trash": "trash",
    "deleted items": "trash",
    "deleted messages": "trash",
    "deleted": "trash",
}
_GMAIL: dict[str, FolderRole] = {
    "all mail": "all",
    "sent mail": "sent",
    "drafts": "drafts",
    "spam": "junk",
    "trash": "trash",
    "bin": "trash",
    "starred": "flagged",
    "important": "important",
}
_GMAIL_ROOTS = ("[gmail]", "[google mail]")


def list_arguments(capabilities: frozenset[str]) -> tuple[bytes, ...]:
    """The arguments of the LIST command the server's capabilities allow."""
    args: tuple[bytes, ...] = (b'""', b'"*"')
    if not capabilities & {"LIST-EXTENDED", "LIST-STATUS"}:
        return args
    options: list[str] = []
    if "SPECIAL-USE" in capabilities:
        options.append("SPECIAL-USE")
    if "LIST-STATUS" in capabilities:
        items = ["MESSAGES", "UIDNEXT", "UIDVALIDITY"]
        if "CONDSTORE" in capabilities:
            items.append("HIGHESTMODSEQ")
        options.append(f"STATUS ({' '.join(items)})")
    if not options:
        return args
    return (*args, b"RETURN", f"({' '.join(options)})".encode())


def mailbox_id_arguments(capabilities: frozenset[str]) -> tuple[bytes, ...] | None:
    """The arguments of the LIST that asks the folders' MAILBOXIDs, if the server has them."""
    if not {"LIST-STATUS", "OBJECTID"} <= capabilities:
        return None
    return (b'""', b'"*"', b"RETURN", b"(STATUS (UIDVALIDITY MAILBOXID))")


def build_listing(
    list_data: Sequence[Any],
    status_data: Sequence[Any],
    capabilities: frozenset[str],
    *,
    max_folders: int = DEFAULT_MAX_FOLDERS,
    id_status_data: Sequence[Any] = (),
) -> FolderListing:
    """imaplib's untagged LIST and STATUS data made into a bounded ``FolderListing``."""
    dropped: Counter[str] = Counter()
    folders: list[Folder] = []
    for tokens in lr.responses(list_data):
        entry = lr.list_entry(tokens) if tokens is not None else None
        if entry is None:
            dropped["malformed"] += 1
            continue
        folder, reason = _folder(entry)
        if folder is None:
            dropped[reason] += 1
            continue
        folders.append(folder)
    folders, duplicates = _unique(folders)
    dropped["duplicate_name"] += duplicates
    _attach_status(folders, status_data)
    _attach_mailbox_ids(folders, id_status_data)
    special_use = "SPECIAL-USE" in capabilities
    folders, unroled = _assign_roles(folders, guess_names=not special_use)
    kept = _cap(folders, max_folders)
    if len(kept) < len(folders):
        dropped["over_cap"] += len(folders) - len(kept)
    return FolderListing(
        folders=tuple(kept),
        dropped=tuple(sorted((r, n) for r, n in dropped.items() if n)),
        unroled=unroled,
        special_use=special_use,
    )


def _folder(entry: lr.ListEntry) -> tuple[Folder | None, str]:
    if len(entry.name) > MAX_NAME_BYTES:
        return None, "name_too_long"
    name = lr.decode_name(entry.name)
    if name is None:
        return None, "undecodable"
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in name):
        return None, "control_characters"
    if entry.delimiter and name.count(entry.delimiter) >= MAX_DEPTH:
        return None, "too_deep"
    if name.upper() == "INBOX":
        name = "INBOX"
    attributes = frozenset(
        _KNOWN_ATTRIBUTES.get(a.lower(), a) for a in entry.attributes[:MAX_ATTRIBUTES]
    )
    return Folder(name=name, delimiter=entry.delimiter, attributes=attributes), ""


def _unique(folders: list[Folder]) -> tuple[list[Folder], int]:
    seen: set[str] = set()
    out: list[Folder] = []
    for folder in folders:
        if folder.name in seen:
            continue
        seen.add(folder.name)
        out.append(folder)
    return out, len(folders) - len(out)


def _status_entries(
    folders: list[Folder], data: Sequence[Any]
) -> Iterator[tuple[int, dict[str, int | str]]]:
    """Each STATUS answer of ``data`` naming one of ``folders``: its index and items."""
    by_name = {folder.name: i for i, folder in enumerate(folders)}
    for tokens in lr.responses(data):
        entry = lr.status_entry(tokens) if tokens is not None else None
        if entry is None:
            continue
        name = lr.decode_name(entry.name)
        index = by_name.get("INBOX" if name and name.upper() == "INBOX" else name or "")
        if index is not None:
            yield index, entry.items


def _attach_status(folders: list[Folder], data: Sequence[Any]) -> None:
    for index, items in _status_entries(folders, data):
        if folders[index].status is not None:
            continue
        status = FolderStatus(
            messages=lr.status_number(items.get("MESSAGES"), low=0, high=lr.UINT32_MAX),
            uidnext=lr.status_number(items.get("UIDNEXT"), low=1, high=lr.UINT32_MAX),
            uidvalidity=lr.status_number(items.get("UIDVALIDITY"), low=1, high=lr.UINT32_MAX),
            highestmodseq=lr.status_number(items.get("HIGHESTMODSEQ"), low=0, high=lr.MODSEQ_MAX),
        )
        folders[index] = replace(folders[index], status=status)


def _attach_mailbox_ids(folders: list[Folder], data: Sequence[Any]) -> None:
    for index, items in _status_entries(folders, data):
        if folders[index].mailbox_id is not None:
            continue
        mailbox_id = items.get("MAILBOXID")
        status = folders[index].status
        uidvalidity = lr.status_number(items.get("UIDVALIDITY"), low=1, high=lr.UINT32_MAX)
        if not isinstance(mailbox_id, str) or status is None or uidvalidity is None:
            continue
        if status.uidvalidity == uidvalidity:
            folders[index] = replace(folders[index], mailbox_id=mailbox_id)


def _assign_roles(folders: list[Folder], *, guess_names: bool) -> tuple[list[Folder], int]:
    held: set[FolderRole] = set()
    unroled = 0
    out: list[Folder] = []
    for folder in folders:
        role = _server_role(folder)
        if role is not None and role in held:
            unroled += 1
            role = None
        if role is not None:
            held.add(role)
        out.append(replace(folder, role=role, role_source="server") if role else folder)
    if not guess_names:
        return out, unroled
    guesses: dict[FolderRole, list[int]] = {}
    for i, folder in enumerate(out):
        if folder.role is None and not _claims_role(folder) and folder.selectable:
            guess = _name_role(folder)
            if guess is not None and guess not in held:
                guesses.setdefault(guess, []).append(i)
    for role, indexes in guesses.items():
        if len(indexes) != 1:
            unroled += len(indexes)
            continue
        out[indexes[0]] = replace(out[indexes[0]], role=role, role_source="name")
    return out, unroled


def _claims_role(folder: Folder) -> bool:
    return any(a.lower() in _SPECIAL_USE for a in folder.attributes)


def _server_role(folder: Folder) -> FolderRole | None:
    if folder.name == "INBOX":
        return "inbox"
    for attribute in sorted(folder.attributes):
        role = _SPECIAL_USE.get(attribute.lower())
        if role is not None:
            return role
    return None


def _name_role(folder: Folder) -> FolderRole | None:
    name = folder.name.lower()
    delim = folder.delimiter
    if delim is None:
        return _WELL_KNOWN.get(name)
    parts = name.split(delim.lower())
    if len(parts) == 1:
        return _WELL_KNOWN.get(parts[0])
    if len(parts) == 2 and parts[0] == "inbox":
        return _WELL_KNOWN.get(parts[1])
    if len(parts) == 2 and parts[0] in _GMAIL_ROOTS:
        return _GMAIL.get(parts[1])
    return None


def _cap(folders: list[Folder], max_folders: int) -> list[Folder]:
    if len(folders) <= max_folders:
        return folders
    first = [i for i, f in enumerate(folders) if f.role is not None][:max_folders]
    chosen = set(first)
    for i in range(len(folders)):
        if len(chosen) >= max_folders:
            break
        chosen.add(i)
    return [f for i, f in enumerate(folders) if i in chosen]


def list_folders(
    conn: Connection, capabilities: frozenset[str], *, max_folders: int
) -> FolderListing:
    """One LIST round trip (two with MAILBOXID) on a logged-in connection, made into a
    ``FolderListing``."""
    list_data, status_data, id_data = conn.io(_lists, conn.client, capabilities)
    return build_listing(
        list_data, status_data, capabilities, max_folders=max_folders, id_status_data=id_data
    )


def _lists(client: Any, capabilities: frozenset[str]) -> tuple[list[Any], list[Any], list[Any]]:
    """Both LISTs, in one operation (one deadline)."""
    list_data, status_data = _list(client, list_arguments(capabilities))
    id_args = mailbox_id_arguments(capabilities)
    return list_data, status_data, _list_ids(client, id_args) if id_args else []


def _list_ids(client: Any, args: tuple[bytes, ...]) -> list[Any]:
    try:
        return wire.list_lines(client, args)[1]
    except IMAPClientAbortError:
        raise
    except IMAPClientError:
        return []


def _list(client: Any, args: tuple[bytes, ...]) -> tuple[list[Any], list[Any]]:
    """LIST with ``args``; a server that announced the extensions but refuses ``RETURN``
    (NO or BAD) is asked once more with a plain LIST, in the same operation."""
    try:
        return wire.list_lines(client, args)
    except IMAPClientAbortError:
        raise
    except IMAPClientError:
        if len(args) == 2:
            raise
        return wire.list_lines(client, args[:2])


def status_arguments(capabilities: frozenset[str]) -> tuple[bytes, ...] | None:
    """The LIST that asks every folder's counters and nothing else (LIST-STATUS), or
    None where the server does not offer it."""
    if "LIST-STATUS" not in capabilities:
        return None
    items = ["MESSAGES", "UIDNEXT", "UIDVALIDITY"]
    if "CONDSTORE" in capabilities:
        items.append("HIGHESTMODSEQ")
    return (b'""', b'"*"', b"RETURN", f"(STATUS ({' '.join(items)}))".encode())


def folder_statuses(
    conn: Connection, capabilities: frozenset[str], *, max_folders: int
) -> dict[str, FolderStatus] | None:
    """Every folder's counters by one LIST round trip (None without LIST-STATUS, or when
    the server refused it): by decoded name, bounded like a listing; a folder the answer
    gave no status for is left out."""
    args = status_arguments(capabilities)
    if args is None:
        return None
    lines = conn.io(_status_lines, conn.client, args)
    if lines is None:
        return None
    list_data, status_data = lines
    listing = build_listing(list_data, status_data, capabilities, max_folders=max_folders)
    return {f.name: f.status for f in listing.folders if f.status is not None}


def _status_lines(client: Any, args: tuple[bytes, ...]) -> tuple[list[Any], list[Any]] | None:
    try:
        return wire.list_lines(client, args)
    except IMAPClientAbortError:
        raise
    except IMAPClientError:  # NO or BAD: the folders are opened one by one instead
        return None
