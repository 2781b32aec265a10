"""The mail read models' query side (``MailReader``): accounts, messages and threads as
the mail use cases read them (the tables are written by ``projections.mail``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from application.ports import SqlDatabase
from projections.mail import MESSAGE_COLUMNS, TABLES
from projections.mail_flags import FLAG_COLUMNS
from projections.mail_moves import FOLDER_MEMBER, folder_member_params


def _account_row(row: Sequence[Any]) -> dict[str, Any]:
    keys = (
        "accountId",
        "tenantId",
        "ownerUserId",
        "scope",
        "provider",
        "authMethod",
        "displayName",
        "address",
        "imap",
        "trustedAuthservId",
        "status",
        "messageCount",
    )
    item = dict(zip(keys, row, strict=True))
    item["imap"] = json.loads(item["imap"])
    return item


_MESSAGE_KEYS = (
    "messageId",
    "accountId",
    "tenantId",
    "providerMessageId",
    "threadKey",
    "messageIdHeader",
    "references",
    "sender",
    "to",
    "cc",
    "subject",
    "snippet",
    "receivedAt",
    "bodyRef",
    "sizeBytes",
    "folder",
    "state",
    "folders",
    "direction",
    "flags",
    "unread",
    "flagged",
    "bodyErased",
)
# The messages' columns as read: the written ones, the flag columns, then what mail
# retention sets.
_SELECT_MESSAGES = ", ".join((*MESSAGE_COLUMNS, *FLAG_COLUMNS, "body_erased"))


class MailReader:
    """Implements ``MailReadModel``."""

    def __init__(self, db: SqlDatabase, tables: Mapping[str, str] = TABLES) -> None:
        self.db = db
        self.t = dict(tables)

    _ACCOUNT_COLUMNS = (
        "account_id, tenant_id, owner_user_id, scope, provider, auth_method,"
        " display_name, address, imap, trusted_authserv_id, status, message_count"
    )

    def accounts(
        self,
        tenant_id: str | None,
        *,
        syncable_only: bool = False,
        owner_user_id: str | None = None,
    ) -> list[dict[str, Any]]:
        sql = f"SELECT {self._ACCOUNT_COLUMNS} FROM {self.t['accounts']} WHERE status <> 'deleted'"
        params: list[Any] = []
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            params.append(tenant_id)
        if syncable_only:
            sql += " AND status = 'active'"
        if owner_user_id is not None:
            sql += " AND owner_user_id = ?"
            params.append(owner_user_id)
        sql += " ORDER BY account_id"
        with self.db.reading() as cur:
            cur.execute(sql, params)
            return [_account_row(row) for row in cur.fetchall()]

    def account_mark(self) -> int:
        """The latest log position at which an account's row changed (0: none yet)."""
        with self.db.reading() as cur:
            cur.execute(f"SELECT MAX(changed_at) FROM {self.t['accounts']}")
            row = cur.fetchone()
        return int(row[0]) if row is not None and row[0] is not None else 0

    def accounts_changed_after(self, mark: int) -> list[dict[str, Any]]:
        """Every account whose row changed after log position ``mark``, whatever its
        status (deleted ones too), oldest change first, each with its ``changedAt``."""
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {self._ACCOUNT_COLUMNS}, changed_at FROM {self.t['accounts']}"
                " WHERE changed_at > ? ORDER BY changed_at",
                (mark,),
            )
            rows = cur.fetchall()
        return [{**_account_row(row[:-1]), "changedAt": int(row[-1])} for row in rows]

    def messages(
        self,
        tenant_id: str,
        *,
        account_ids: list[str] | None,
        thread_key: str | None,
        state: str | None,
        limit: int,
        after: tuple[str, str] | None,
        unread: bool | None = None,
        flagged: bool | None = None,
        folder: str | None = None,
        direction: str | None = None,
    ) -> list[dict[str, Any]]:
        if account_ids is not None and not account_ids:
            return []
        sql = f"SELECT {_SELECT_MESSAGES} FROM {self.t['messages']} WHERE tenant_id = ?"
        params: list[Any] = [tenant_id]
        if direction == "inbound":  # rows from before ``direction`` was kept are inbound
            sql += " AND (direction = 'inbound' OR direction IS NULL)"
        elif direction is not None:
            sql += " AND direction = ?"
            params.append(direction)
        if folder is not None:  # membership: any of the message's folders
            sql += f" AND {FOLDER_MEMBER}"
            params += folder_member_params(folder)
        filters = (("thread_key", thread_key), ("state", state))
        for column, value in filters:
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        for column, wanted in (("unread", unread), ("flagged", flagged)):
            if wanted is not None:
                sql += f" AND {column} = ?"
                params.append(int(wanted))
        return self._newest_first(
            sql,
            params,
            account_ids=account_ids,
            order=("received_at", "message_id"),
            limit=limit,
            after=after,
            keys=_MESSAGE_KEYS,
        )

    def _newest_first(
        self,
        sql: str,
        params: list[Any],
        *,
        account_ids: list[str] | None,
        order: tuple[str, str],
        limit: int,
        after: tuple[str, str] | None,
        keys: tuple[str, ...],
    ) -> list[dict[str, Any]]:
        """Finish a listing: account scope, keyset paging on (time, id) descending."""
        if account_ids is not None:
            sql += f" AND account_id IN ({', '.join('?' * len(account_ids))})"
            params += account_ids
        at, key = order
        if after is not None:
            sql += f" AND ({at} < ? OR ({at} = ? AND {key} < ?))"
            params += [after[0], after[0], after[1]]
        sql += f" ORDER BY {at} DESC, {key} DESC LIMIT ?"
        params.append(limit)
        with self.db.reading() as cur:
            cur.execute(sql, params)
            return [dict(zip(keys, row, strict=True)) for row in cur.fetchall()]

    def message(self, message_id: str) -> dict[str, Any] | None:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {_SELECT_MESSAGES} FROM {self.t['messages']} WHERE message_id = ?",
                (message_id,),
            )
            row = cur.fetchone()
        return None if row is None else dict(zip(_MESSAGE_KEYS, row, strict=True))

    def account_folders(self, account_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Per account, its synced folders as its folder events named them, by name."""
        if not account_ids:
            return {}
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT account_id, name, role FROM {self.t['folders']}"
                f" WHERE account_id IN ({', '.join('?' * len(account_ids))})",
                list(account_ids),
            )
            rows = cur.fetchall()
        found: dict[str, list[dict[str, Any]]] = {}
        for account_id, name, role in sorted(rows, key=lambda r: (r[0], r[1] != "INBOX", r[1])):
            found.setdefault(account_id, []).append({"name": name, "role": role})
        return found

    def recent_mail(self, since: float) -> dict[str, float]:
        """Active accounts whose newest mail arrived at or after ``since`` (unix seconds)
        -> that time: one statement for all of them."""
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT account_id, last_mail_at FROM {self.t['accounts']}"
                " WHERE status = 'active' AND last_mail_at >= ?",
                (since,),
            )
            return {str(account_id): float(at) for account_id, at in cur.fetchall()}

    def threads(
        self,
        tenant_id: str,
        *,
        account_ids: list[str] | None,
        limit: int,
        after: tuple[str, str] | None,
    ) -> list[dict[str, Any]]:
        sql = (
            f"SELECT thread_key, account_id, message_count, last_received_at, subject"
            f" FROM {self.t['threads']} WHERE tenant_id = ?"
        )
        if account_ids is not None and not account_ids:
            return []
        keys = ("threadKey", "accountId", "messageCount", "lastReceivedAt", "subject")
        return self._newest_first(
            sql,
            [tenant_id],
            account_ids=account_ids,
            order=("last_received_at", "thread_key"),
            limit=limit,
            after=after,
            keys=keys,
        )
