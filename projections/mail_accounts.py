"""The mail read model's ``accounts`` rows (and an account's folder events): what an
account's own events write. ``projections.mail`` hands them here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from application.ports import SqlCursor
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


def apply_account(cur: SqlCursor, tables: Mapping[str, str], event: DomainEvent) -> None:
    """An account's or its folders' event."""
    accounts = tables["accounts"]
    if isinstance(event, MailFolderListed | MailFolderRenamed | MailFolderGone):
        apply_folder(cur, tables, event)
    elif isinstance(event, MailAccountConnected):
        cur.execute(
            f"INSERT INTO {accounts} (account_id, tenant_id, owner_user_id, scope,"
            " provider, auth_method, display_name, address, imap, trusted_authserv_id,"
            " status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active')"
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
            ),
        )
    elif isinstance(event, MailAccountUpdated):
        _update(cur, accounts, str(event.originator_id), event.changes)
    elif type(event) in STATUS:
        _status(cur, tables, event)


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
