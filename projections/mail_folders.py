"""The mail read model's ``folders`` table: an account's synced folders as its folder
events name them (one row per (account, folder key): name, role). Written by
``MailProjection``, which owns the table (rebuilds, deletes with the account)."""

from __future__ import annotations

from collections.abc import Mapping

from application.ports import SqlCursor
from domain.mail_account import MailFolderGone, MailFolderListed, MailFolderRenamed


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
        return
    cur.execute(
        f"INSERT INTO {folders} (account_id, folder_key, tenant_id, name, role)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (account_id, folder_key) DO UPDATE SET"
        " name = excluded.name, role = excluded.role",
        (account_id, event.folder_key, event.tenant_id, event.name, event.role),
    )
