"""Which folders a watch asks its server to push beside INBOX (NOTIFY, RFC 5465).

A watch IDLEs on INBOX; where the server offers NOTIFY, the same connection also hears
of changes in the account's other synced folders (as the folder state last listed them),
and each such change has the account polled soon instead of at its next poll. Without
NOTIFY, or before the account's folders were ever listed, nothing is asked: the folders
wait for the poll as before (and a watch is asked again after each listing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from application.mail.folder_state import FolderStateStore


@runtime_checkable
class FolderPush(Protocol):
    """A watch's session that can have folders pushed (``ImapMailboxSession``)."""

    @property
    def capabilities(self) -> frozenset[str]: ...

    def notify_folders(self, folders: Sequence[str]) -> bool:
        """Have ``folders`` (other than INBOX) pushed on this connection; an empty list
        stops an earlier push. False without NOTIFY, or when the server refused it."""
        ...


def push_folders(folders: FolderStateStore | None, account_id: str, session: object) -> bool:
    """Ask ``session`` to push the account's synced folders other than INBOX; True when
    the server pushes them now. The folder state is read only where the server offers
    NOTIFY, so a watch on any other server costs nothing more."""
    if folders is None or not isinstance(session, FolderPush):
        return False
    if "NOTIFY" not in session.capabilities:
        return False
    names = [row.name for row in folders.folders(account_id) if row.name.upper() != "INBOX"]
    return session.notify_folders(names)
