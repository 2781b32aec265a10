"""Operational state of each synced folder other than INBOX: its key, its name and role as
last listed, its own cursor and its health (the ``mail_folders`` table).

Like ``state.MailboxStateStore`` this is not domain history: it changes on every poll,
so workers write it to a plain table. INBOX keeps its cursor in ``mailbox_state`` (the
watch path reads it there); its row here carries only its listing and health.

Invariants:

- ``folder_key`` is uuid5(account, MAILBOXID) where the server gives one, else uuid5 of
  (account, name) when the folder is first seen (``folder_key``); a rename found by
  MAILBOXID and a reset keep the key, a folder gone loses its row.
- A rename carries the folder's UID-map rows and flag cursor to its new name, and a folder
  the server no longer lists marks its UID-map rows ``FOLDER_GONE``, in the listing's
  own write: the membership pass never sees a renamed folder's rows as gone.
- A folder's cursor is saved only after its page was ingested (a crash in between
  re-fetches the page, and dedup by message identity absorbs it); a UIDVALIDITY reset
  empties it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from application.mail.ports import MailboxCursor
from application.mail.state import ErrorKind

FOLDER_GONE = 0
"""The UIDVALIDITY a UID-map row gets when its folder is gone from a believed listing (no
real UIDVALIDITY is 0): from then on the row places its message nowhere."""
FOLDER_KEY_NAMESPACE = uuid.UUID("5b0b7c8e-2f4c-4d0e-9a4a-3c7e1f0d6a11")


def folder_key(account_id: str, mailbox_id: str | None, name: str = "") -> str:
    """The key of a newly seen folder: uuid5 of its MAILBOXID where the server gives one,
    else of its name, so racing workers that list the same new folder make the same key
    (one row, one ``MailFolderListed``). A folder deleted and made again under its name
    is the same key with a new UIDVALIDITY: a reset, as the matching reads it anyway."""
    if mailbox_id:
        return uuid.uuid5(FOLDER_KEY_NAMESPACE, f"{account_id}\x00id\x00{mailbox_id}").hex
    return uuid.uuid5(FOLDER_KEY_NAMESPACE, f"{account_id}\x00name\x00{name}").hex


@dataclass(frozen=True, slots=True)
class FolderRow:
    """One synced folder as the sync state remembers it."""

    account_id: str
    folder_key: str
    name: str
    role: str | None = None
    mailbox_id: str | None = None
    uidvalidity: int | None = None  # as last listed (LIST-STATUS) or paged
    cursor: MailboxCursor | None = None  # None: first sync (backfill window), or reset
    listed_at: datetime | None = None
    last_sync_at: datetime | None = None
    last_error_kind: str | None = None
    consecutive_failures: int = 0


class FolderStateStore(Protocol):
    def folders(self, account_id: str) -> list[FolderRow]:
        """The account's folders, INBOX first, then by name."""
        ...

    def save_listing(
        self,
        account_id: str,
        rows: Sequence[FolderRow],
        gone: Iterable[str],
        at: datetime,
        *,
        renamed: Mapping[str, str] | None = None,
        vanished: Iterable[str] = (),
    ) -> None:
        """After a LIST: each row's name, role, mailbox id, uidvalidity and cursor as given
        (a new row is inserted), the ``gone`` keys removed, every row marked listed ``at``;
        the UID map and flag cursors of ``renamed`` folders (old name -> new) carried to
        their new name, the UID-map rows of ``vanished`` folders (names the server no
        longer lists) marked ``FOLDER_GONE`` for the membership pass; one write."""
        ...

    def save_cursor(
        self, account_id: str, key: str, cursor: MailboxCursor | None, at: datetime
    ) -> None:
        """A folder's page was ingested: its cursor, and a successful sync ``at``."""
        ...

    def record_failure(self, account_id: str, key: str, kind: ErrorKind, at: datetime) -> None: ...

    def relist_soon(self, account_id: str) -> None:
        """Have the account's folders listed again at its next poll."""
        ...

    def health(self, account_ids: Iterable[str]) -> dict[str, list[FolderRow]]:
        """Per account, its folders (accounts without any are left out)."""
        ...

    def forget(self, account_id: str) -> None: ...
