"""The mail read model's ``folders`` table: an account's synced folders as its folder
events name them (one row per (account, folder key): name, role). Written by
``MailProjection``, which owns the table (rebuilds, deletes with the account).

A ``MailFolderRenamed`` also renames the folder in the account's messages' ``folders``
(``rename_in_messages``): one statement per message row that names it, no event per
message. The message streams keep the old name; the membership pass compares with the
name now (``MailAccount.renamed_name``), and a rebuild applies the events in the same
order, so it gives the same rows."""

from __future__ import annotations

import json
from collections.abc import Mapping

from application.ports import Dialect, SqlCursor
from domain.mail_account import MailFolderGone, MailFolderListed, MailFolderRenamed
from projections.indexes import ensure_index
from projections.mail_moves import FOLDER_MEMBER, folder_member_params, folders_json


def create_folders(cur: SqlCursor, folders: str) -> None:
    """The table (idempotent: also how databases made before it gain it)."""
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {folders} (account_id TEXT NOT NULL,"
        " folder_key TEXT NOT NULL, tenant_id TEXT NOT NULL, name TEXT NOT NULL,"
        " role TEXT, PRIMARY KEY (account_id, folder_key))"
    )


def apply_folder(
    cur: SqlCursor,
    tables: Mapping[str, str],
    event: MailFolderListed | MailFolderRenamed | MailFolderGone,
) -> None:
    """An account's synced folder: listed (inserted, or its role changed), renamed, gone.
    Folders of a deleted account are passed over."""
    folders, account_id = tables["folders"], str(event.originator_id)
    if isinstance(event, MailFolderGone):
        cur.execute(
            f"DELETE FROM {folders} WHERE account_id = ? AND folder_key = ?",
            (account_id, event.folder_key),
        )
        return
    cur.execute(f"SELECT status FROM {tables['accounts']} WHERE account_id = ?", (account_id,))
    row = cur.fetchone()
    if row is None or row[0] == "deleted":
        return
    if isinstance(event, MailFolderRenamed):
        cur.execute(
            f"UPDATE {folders} SET name = ? WHERE account_id = ? AND folder_key = ?",
            (event.name, account_id, event.folder_key),
        )
        rename_in_messages(cur, tables["messages"], account_id, event.old_name, event.name)
        return
    cur.execute(
        f"INSERT INTO {folders} (account_id, folder_key, tenant_id, name, role)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (account_id, folder_key) DO UPDATE SET"
        " name = excluded.name, role = excluded.role",
        (account_id, event.folder_key, event.tenant_id, event.name, event.role),
    )


# Columns messages tables created before them gain; NULL in old rows reads as the
# message's one ``folder`` and ``inbound``, what a rebuild writes for those events.
ADDED_MESSAGE_COLUMNS = {"folders": "TEXT", "direction": "TEXT"}


def upgrade_folder_columns(cur: SqlCursor, dialect: Dialect, messages: str) -> None:
    """``folders`` and ``direction`` on a messages table made before them, and the index of
    the ``folder`` filter (idempotent)."""
    if dialect == "postgresql":
        for name, kind in ADDED_MESSAGE_COLUMNS.items():
            cur.execute(f"ALTER TABLE {messages} ADD COLUMN IF NOT EXISTS {name} {kind}")
    else:
        cur.execute(f"PRAGMA table_info({messages})")
        present = {row[1] for row in cur.fetchall()}
        for name, kind in ADDED_MESSAGE_COLUMNS.items():
            if name not in present:
                cur.execute(f"ALTER TABLE {messages} ADD COLUMN {name} {kind}")
    ensure_index(cur, dialect, messages, "folder", "(tenant_id, folder, received_at)")


def rename_in_messages(cur: SqlCursor, messages: str, account_id: str, old: str, new: str) -> None:
    """``old`` becomes ``new`` in the ``folders`` of the account's messages in it (kept
    sorted, as the membership events write them)."""
    cur.execute(
        f"SELECT message_id, folders FROM {messages} WHERE account_id = ? AND {FOLDER_MEMBER}",
        (account_id, *folder_member_params(old)),
    )
    updates = []
    for message_id, text in cur.fetchall():
        names = set(json.loads(text)) if text else {old}
        renamed = sorted({new if n == old else n for n in names})
        updates.append((folders_json(renamed), message_id))
    if updates:
        cur.executemany(f"UPDATE {messages} SET folders = ? WHERE message_id = ?", updates)
