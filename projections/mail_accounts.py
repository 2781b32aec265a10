"""The mail read model's ``accounts`` rows (and an account's folder events): what an
account's own events write. ``projections.mail`` hands them here.

Each of an account's own events (connected, updated, a status change) sets the row's
``changed_at`` to the event's position in the log. The projection applies the log in
order, one transaction after another, so a reader that has seen every row changed up to
position ``p`` finds all later changes with ``changed_at > p``
(``MailReader.accounts_changed_after``): the worker's account directory reads only those
at most fleet ticks instead of every account. A deleted account keeps its row (status
``deleted``), so a reader of changes sees deletes too. Message counts and
``last_mail_at`` leave ``changed_at`` alone: a burst of mail changes no account's
identity. Rows from before the column was kept have none (NULL) until their account's
next event; a full read sees them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from application.ports import Dialect, SqlCursor
from domain.events import DomainEvent
from domain.mail_account import (
    MailAccountAuthFailed,
    MailAccountConnected,
    MailAccountDeleted,
    MailAccountDisconnected,
    MailAccountReauthRequired,
    MailAccountReconnected,
    MailAccountUpdated,
    MailFolderGone,
    MailFolderListed,
    MailFolderRenamed,
)
from projections.mail_folders import apply_folder

STATUS: dict[type[DomainEvent], str] = {
    MailAccountAuthFailed: "auth_error",
    MailAccountDisconnected: "disconnected",
    MailAccountReconnected: "active",
    MailAccountDeleted: "deleted",
    MailAccountReauthRequired: "reauth_required",
}


def upgrade_accounts(cur: SqlCursor, dialect: Dialect, accounts: str) -> None:
    """An accounts table created before ``last_mail_at`` or ``changed_at`` gains them."""
    columns = (("last_mail_at", "DOUBLE PRECISION"), ("changed_at", "BIGINT"))
    if dialect == "postgresql":
        for column, kind in columns:
            cur.execute(f"ALTER TABLE {accounts} ADD COLUMN IF NOT EXISTS {column} {kind}")
        return
    cur.execute(f"PRAGMA table_info({accounts})")
    present = {row[1] for row in cur.fetchall()}
    for column, kind in columns:
        if column not in present:
            cur.execute(f"ALTER TABLE {accounts} ADD COLUMN {column} {kind}")


def apply_account(
    cur: SqlCursor, tables: Mapping[str, str], position: int, event: DomainEvent
) -> None:
    """An account's or its folders' event, at ``position`` in the log."""
    accounts = tables["accounts"]
    if isinstance(event, MailFolderListed | MailFolderRenamed | MailFolderGone):
        apply_folder(cur, tables, event)
        return
    if isinstance(event, MailAccountConnected):
        cur.execute(
            f"INSERT INTO {accounts} (account_id, tenant_id, owner_user_id, scope,"
            " provider, auth_method, display_name, address, imap, trusted_authserv_id,"
            " status, changed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?)"
            " ON CONFLICT (account_id) DO NOTHING",
            (
                str(event.originator_id),
                event.tenant_id,
                event.owner_user_id,
                event.scope,
                event.provider,
                event.auth_method,
                event.display_name,
                event.address,
                json.dumps(event.imap),
                event.trusted_authserv_id,
                position,
            ),
        )
        return
    if isinstance(event, MailAccountUpdated):
        _update(cur, accounts, str(event.originator_id), event.changes)
    elif type(event) in STATUS:
        _status(cur, tables, event)
    else:
        return
    cur.execute(
        f"UPDATE {accounts} SET changed_at = ? WHERE account_id = ?",
        (position, str(event.originator_id)),
    )


def _status(cur: SqlCursor, tables: Mapping[str, str], event: DomainEvent) -> None:
    """A status change; a delete also removes the account's rows everywhere."""
    accounts, account_id = tables["accounts"], str(event.originator_id)
    cur.execute(
        f"UPDATE {accounts} SET status = ? WHERE account_id = ?",
        (STATUS[type(event)], account_id),
    )
    if isinstance(event, MailAccountDeleted):
        for table in ("messages", "threads", "folders"):
            cur.execute(f"DELETE FROM {tables[table]} WHERE account_id = ?", (account_id,))
        cur.execute(f"UPDATE {accounts} SET message_count = 0 WHERE account_id = ?", (account_id,))


def _update(cur: SqlCursor, accounts: str, account_id: str, changes: dict[str, Any]) -> None:
    columns = {"display_name": "display_name", "trusted_authserv_id": "trusted_authserv_id"}
    for key, column in columns.items():
        if key in changes:
            cur.execute(
                f"UPDATE {accounts} SET {column} = ? WHERE account_id = ?",
                (changes[key], account_id),
            )
    if "imap" in changes:
        cur.execute(
            f"UPDATE {accounts} SET imap = ? WHERE account_id = ?",
            (json.dumps(changes["imap"]), account_id),
        )
