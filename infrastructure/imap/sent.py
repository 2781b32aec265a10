"""The Sent folder for the outbox: find a message by its Message-ID there (``UID SEARCH
HEADER Message-ID``), and append the copy of a message just sent (flagged seen).

The Sent folder is the one the folder listing gives the ``sent`` role (SPECIAL-USE, or
the name a server without it uses). Each step runs under the session's deadline like
every other IMAP command (``Connection.io``); the caller's deadline bounds them all.
"""

from __future__ import annotations

from typing import Any

from infrastructure.imap.connection import Connection
from infrastructure.imap.folders import list_folders

SEEN = b"\\Seen"


def sent_folder(conn: Connection, capabilities: frozenset[str]) -> str | None:
    listing = list_folders(conn, capabilities, max_folders=conn.settings.max_folders)
    for folder in listing.folders:
        if folder.role == "sent" and folder.selectable:
            return folder.name
    return None


def find_in_sent(conn: Connection, capabilities: frozenset[str], message_id: str) -> bool | None:
    """Whether the Sent folder holds ``message_id`` (None: there is no Sent folder)."""
    folder = sent_folder(conn, capabilities)
    if folder is None:
        return None
    client: Any = conn.client
    conn.io(client.select_folder, folder, True)
    found = conn.io(client.search, ["HEADER", "Message-ID", message_id])
    return bool(found)


def append_to_sent(conn: Connection, capabilities: frozenset[str], message: bytes) -> bool:
    folder = sent_folder(conn, capabilities)
    if folder is None:
        return False
    client: Any = conn.client
    conn.io(client.append, folder, message, (SEEN,))
    return True
