"""Mail read models: accounts, messages and threads (personal fields stay sealed).

- ``accounts``: one row per account with its status, message count and ``last_mail_at``
  (unix seconds: the newest message's arrival, never later than when it was recorded —
  what keeps an account hot across a fleet restart; ``recent_mail`` reads it for all
  accounts at once), and ``changed_at``: the log position of the account's last own
  event (``projections.mail_accounts``), so that a reader reads only what changed.
- ``messages``: one row per ingested message; deleted accounts' rows are removed with
  one set-based DELETE, and messages recorded after their account's delete are passed
  over. A ``deferred`` message's row takes what its body brought (``MessageBodyFetched``:
  state, snippet, body ref, size) or becomes ``vanished`` (``MessageBodyVanished``); its
  thread and counts were set when it was recorded and stay. ``flags`` (JSON, sorted),
  ``unread`` and ``flagged`` (0/1) start from the flags at arrival
  (``MessageIngested.extra``) and take each ``MessageFlagsChanged`` whole.
  Mail retention: ``projections.mail_retention``.
- ``threads``: one row per (account, thread key) with count and latest time.
- ``folders``: one row per synced folder of an account (key, name, role), from the
  account's folder events; removed with the account.

This module writes them; ``projections.mail_reader`` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from application.ports import Dialect, Recorded, SqlCursor
from domain.events import DomainEvent
from domain.mail_account import (
    MailAccountConnected,
    MailAccountUpdated,
    MailFolderGone,
    MailFolderListed,
    MailFolderRenamed,
)
from domain.message import (
    MessageBodyFetched,
    MessageBodyVanished,
    MessageFlagsChanged,
    MessageIngested,
)
from domain.message_retention import MessageBodyErased, MessageExpired
from projections.base import index_name, shadow_tables
from projections.mail_accounts import STATUS, apply_account, upgrade_accounts
from projections.mail_flags import add_flag_columns, arrival_flags, set_flags
from projections.mail_folders import create_folders, upgrade_folder_columns
from projections.mail_moves import MOVES, apply_membership
from projections.mail_retention import (
    BODY_ERASED_COLUMN,
    create_retention_indexes,
    retire,
    upgrade_body_erased,
)

TABLES = {
    "accounts": "mail_accounts",
    "messages": "mail_messages",
    "threads": "mail_threads",
    "folders": "mail_account_folders",
}

_CONSUMED: tuple[type[DomainEvent], ...] = (
    MessageIngested,
    MessageBodyFetched,
    MessageBodyVanished,
    MessageFlagsChanged,
    MessageBodyErased,
    MessageExpired,
    *MOVES,
    MailAccountConnected,
    MailAccountUpdated,
    MailFolderListed,
    MailFolderRenamed,
    MailFolderGone,
    *STATUS,
)
TOPICS = frozenset(cls.TOPIC for cls in _CONSUMED)
_LATER_MESSAGE_EVENTS = (
    MessageBodyFetched,
    MessageBodyVanished,
    MessageFlagsChanged,
    *MOVES,
)

MESSAGE_COLUMNS = (
    "message_id",
    "account_id",
    "tenant_id",
    "provider_message_id",
    "thread_key",
    "message_id_header",
    "refs",
    "sender",
    "to_addrs",
    "cc_addrs",
    "subject",
    "snippet",
    "received_at",
    "body_ref",
    "size_bytes",
    "folder",
    "state",
    "folders",
    "direction",
)


# PostgreSQL types of MESSAGE_COLUMNS, for the batch insert over arrays.
_MESSAGE_TYPES = ("text",) * 14 + ("bigint", "text", "text", "text", "text")


class MailProjection:
    topics = TOPICS  # the runner hands it these events only

    def __init__(self, tables: Mapping[str, str] = TABLES, name: str = "mail") -> None:
        self._tables = dict(tables)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def tables(self) -> Mapping[str, str]:
        return self._tables

    def shadow(self) -> MailProjection:
        return MailProjection(shadow_tables(self._tables), name=f"{self._name}__next")

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        accounts, messages, threads = (self._tables[k] for k in ("accounts", "messages", "threads"))
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {accounts} (account_id TEXT PRIMARY KEY,"
            " tenant_id TEXT NOT NULL, owner_user_id TEXT, scope TEXT NOT NULL,"
            " provider TEXT NOT NULL, auth_method TEXT NOT NULL, display_name TEXT NOT NULL,"
            " address TEXT NOT NULL, imap TEXT NOT NULL, trusted_authserv_id TEXT,"
            " status TEXT NOT NULL, message_count INTEGER NOT NULL DEFAULT 0,"
            " last_mail_at DOUBLE PRECISION, changed_at BIGINT)"
        )
        cur.execute(f"CREATE INDEX {index_name(accounts, 'tenant')} ON {accounts} (tenant_id)")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {messages} (message_id TEXT PRIMARY KEY,"
            " account_id TEXT NOT NULL, tenant_id TEXT NOT NULL,"
            " provider_message_id TEXT NOT NULL, thread_key TEXT NOT NULL,"
            " message_id_header TEXT NOT NULL, refs TEXT NOT NULL, sender TEXT NOT NULL,"
            " to_addrs TEXT NOT NULL, cc_addrs TEXT NOT NULL, subject TEXT NOT NULL,"
            " snippet TEXT NOT NULL, received_at TEXT NOT NULL, body_ref TEXT,"
            " size_bytes BIGINT NOT NULL, folder TEXT NOT NULL, state TEXT NOT NULL,"
            f" folders TEXT, direction TEXT, {BODY_ERASED_COLUMN})"
        )
        cur.execute(
            f"CREATE INDEX {index_name(messages, 'folder')} ON {messages}"
            " (tenant_id, folder, received_at)"
        )
        cur.execute(
            f"CREATE INDEX {index_name(messages, 'recent')} ON {messages}"
            " (tenant_id, received_at, message_id)"
        )
        cur.execute(f"CREATE INDEX {index_name(messages, 'account')} ON {messages} (account_id)")
        add_flag_columns(cur, dialect, self._tables["messages"])
        create_retention_indexes(cur, messages)
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {threads} (account_id TEXT NOT NULL,"
            " thread_key TEXT NOT NULL, tenant_id TEXT NOT NULL, subject TEXT NOT NULL,"
            " message_count INTEGER NOT NULL, last_received_at TEXT NOT NULL,"
            " PRIMARY KEY (account_id, thread_key))"
        )
        create_folders(cur, self._tables["folders"])

    def upgrade(self, cur: SqlCursor, dialect: Dialect) -> None:
        """Accounts tables created before ``last_mail_at`` or ``changed_at`` was kept gain
        them, and messages tables created before the flag columns, ``folders``,
        ``direction`` and mail retention's ``body_erased`` gain those (idempotent)."""
        add_flag_columns(cur, dialect, self._tables["messages"])
        upgrade_accounts(cur, dialect, self._tables["accounts"])
        upgrade_folder_columns(cur, dialect, self._tables["messages"])
        upgrade_body_erased(cur, dialect, self._tables["messages"])
        create_folders(cur, self._tables["folders"])

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        messages = self._tables["messages"]
        ingested: list[MessageIngested] = []
        retired: list[MessageBodyErased | MessageExpired] = []  # also a run, set-wise
        for recorded in batch:
            event = recorded.event
            if not isinstance(event, MessageBodyErased | MessageExpired) and retired:
                retire(cur, messages, retired)
                retired = []
            if isinstance(event, MessageIngested):
                ingested.append(event)  # runs of them are written set-wise, in order
                continue
            if ingested:
                self._insert_messages(cur, dialect, ingested)
                set_flags(cur, messages, arrival_flags(ingested))
                ingested = []
            if isinstance(event, MessageBodyErased | MessageExpired):
                retired.append(event)
            elif isinstance(event, _LATER_MESSAGE_EVENTS):
                self._later(cur, event)
            else:
                apply_account(cur, self._tables, recorded.position, event)
        if ingested:
            self._insert_messages(cur, dialect, ingested)
            set_flags(cur, messages, arrival_flags(ingested))
        retire(cur, messages, retired)

    def _complete(self, cur: SqlCursor, event: MessageBodyFetched | MessageBodyVanished) -> None:
        """A deferred message's second event: what its body brought, or ``vanished``."""
        messages = self._tables["messages"]
        if isinstance(event, MessageBodyVanished):
            cur.execute(
                f"UPDATE {messages} SET state = 'vanished'"
                " WHERE message_id = ? AND state = 'deferred'",
                (str(event.originator_id),),
            )
            return
        cur.execute(
            f"UPDATE {messages} SET state = ?, snippet = ?, body_ref = ?, size_bytes = ?"
            " WHERE message_id = ? AND state = 'deferred'",
            (
                event.state,
                event.snippet,
                event.body_ref,
                event.size_bytes,
                str(event.originator_id),
            ),
        )

    def _later(self, cur: SqlCursor, event: DomainEvent) -> None:
        """A message's event after ``MessageIngested``: body, flags, folders."""
        messages = self._tables["messages"]
        if isinstance(event, MessageFlagsChanged):
            set_flags(cur, messages, [(str(event.originator_id), event.flags)])
        elif isinstance(event, MessageBodyFetched | MessageBodyVanished):
            self._complete(cur, event)
        else:
            apply_membership(cur, messages, event)

    def _insert_messages(
        self, cur: SqlCursor, dialect: Dialect, events: Sequence[MessageIngested]
    ) -> None:
        """A run of ``MessageIngested`` in a few set-wise statements (one round trip each,
        not four per message): messages of deleted accounts and messages already in the
        table are passed over, then rows are inserted and the account and thread counts
        raised by what was inserted."""
        accounts, threads = self._tables["accounts"], self._tables["threads"]
        pg = dialect == "postgresql"
        account_ids = sorted({e.account_id for e in events})
        cur.execute(
            f"SELECT account_id FROM {accounts} WHERE status = 'deleted' AND account_id"
            + (" = ANY(?::text[])" if pg else f" IN ({', '.join('?' * len(account_ids))})"),
            [account_ids] if pg else account_ids,
        )
        deleted = {row[0] for row in cur.fetchall()}
        fresh: dict[str, MessageIngested] = {}
        for event in events:
            if event.account_id not in deleted:
                fresh.setdefault(str(event.originator_id), event)
        if not fresh:
            return
        rows = [
            (
                message_id,
                e.account_id,
                e.tenant_id,
                e.provider_message_id,
                e.thread_key,
                e.message_id_header,
                e.references,
                e.sender,
                e.to,
                e.cc,
                e.subject,
                e.snippet,
                e.received_at,
                e.body_ref,
                e.size_bytes,
                e.folder,
                e.state,
                json.dumps([e.folder], ensure_ascii=False),
                direction_of(e),
            )
            for message_id, e in fresh.items()
        ]
        inserted = (self._insert_arrays if pg else self._insert_rows)(cur, rows)
        fresh = {message_id: fresh[message_id] for message_id in fresh if message_id in inserted}
        if not fresh:
            return
        per_account: dict[str, int] = {}
        latest: dict[str, float] = {}
        per_thread: dict[tuple[str, str], tuple[str, str, int, str]] = {}
        for e in fresh.values():
            per_account[e.account_id] = per_account.get(e.account_id, 0) + 1
            latest[e.account_id] = max(latest.get(e.account_id, NO_MAIL), _arrived(e))
            key = (e.account_id, e.thread_key)
            tenant, subject, count, last = per_thread.get(key, (e.tenant_id, e.subject, 0, ""))
            # A new thread row takes its first message's subject, as one by one would.
            per_thread[key] = (tenant, subject, count + 1, max(last, e.received_at))
        if pg:
            cur.execute(
                f"UPDATE {accounts} AS a SET message_count = a.message_count + u.n,"
                " last_mail_at = CASE WHEN a.last_mail_at IS NULL OR a.last_mail_at < u.at"
                " THEN u.at ELSE a.last_mail_at END"
                " FROM unnest(?::int[], ?::float8[], ?::text[]) AS u(n, at, id)"
                " WHERE a.account_id = u.id",
                [
                    list(per_account.values()),
                    [latest[account_id] for account_id in per_account],
                    list(per_account),
                ],
            )
        else:
            cur.executemany(
                f"UPDATE {accounts} SET message_count = message_count + ?,"
                " last_mail_at = CASE WHEN last_mail_at IS NULL OR last_mail_at < ? THEN ?"
                " ELSE last_mail_at END WHERE account_id = ?",
                [
                    (count, latest[account_id], latest[account_id], account_id)
                    for account_id, count in per_account.items()
                ],
            )
        upsert = (
            " ON CONFLICT (account_id, thread_key) DO UPDATE SET"
            f" message_count = {threads}.message_count + excluded.message_count,"
            f" last_received_at = CASE WHEN excluded.last_received_at >"
            f" {threads}.last_received_at THEN excluded.last_received_at"
            f" ELSE {threads}.last_received_at END"
        )
        columns = "account_id, thread_key, tenant_id, subject, message_count, last_received_at"
        self._write(
            cur,
            pg,
            f"INSERT INTO {threads} ({columns}) VALUES (?, ?, ?, ?, ?, ?)" + upsert,
            f"INSERT INTO {threads} ({columns}) SELECT * FROM unnest(?::text[], ?::text[],"
            " ?::text[], ?::text[], ?::int[], ?::text[])" + upsert,
            [(*key, *row) for key, row in per_thread.items()],
        )

    def _insert_rows(self, cur: SqlCursor, rows: Sequence[Sequence[Any]]) -> set[str]:
        """SQLite: the rows not in the table yet, inserted; answers their ids."""
        messages = self._tables["messages"]
        cur.execute(
            f"SELECT message_id FROM {messages} WHERE message_id IN ({', '.join('?' * len(rows))})",
            [row[0] for row in rows],
        )
        known = {found for (found,) in cur.fetchall()}
        fresh = [row for row in rows if row[0] not in known]
        cur.executemany(
            f"INSERT INTO {messages} ({', '.join(MESSAGE_COLUMNS)}) VALUES"
            f" ({', '.join('?' * len(MESSAGE_COLUMNS))}) ON CONFLICT (message_id) DO NOTHING",
            fresh,
        )
        return {row[0] for row in fresh}

    def _insert_arrays(self, cur: SqlCursor, rows: Sequence[Sequence[Any]]) -> set[str]:
        """PostgreSQL: one insert over arrays, passing over ids already in the table;
        answers the ids it inserted."""
        cur.execute(
            f"INSERT INTO {self._tables['messages']} ({', '.join(MESSAGE_COLUMNS)})"
            " SELECT * FROM unnest("
            + ", ".join(f"?::{kind}[]" for kind in _MESSAGE_TYPES)
            + ") ON CONFLICT (message_id) DO NOTHING RETURNING message_id",
            [list(column) for column in zip(*rows, strict=True)],
        )
        return {found for (found,) in cur.fetchall()}

    @staticmethod
    def _write(
        cur: SqlCursor, pg: bool, per_row: str, over_arrays: str, rows: Sequence[Sequence[Any]]
    ) -> None:
        """PostgreSQL: one statement over parallel arrays; SQLite: one executemany."""
        if pg:
            cur.execute(over_arrays, [list(column) for column in zip(*rows, strict=True)])
        else:
            cur.executemany(per_row, rows)


NO_MAIL = float("-inf")


def direction_of(event: MessageIngested) -> str:
    """The event's ``direction``; ``inbound`` for events recorded before it was kept."""
    return "outbound" if event.extra.get("direction") == "outbound" else "inbound"


def _arrived(event: MessageIngested) -> float:
    """When the message arrived (its ``received_at``), but never later than when it was
    recorded: a Date header in the future must not keep an account hot for days."""
    recorded = event.timestamp.timestamp()
    try:
        received = datetime.fromisoformat(event.received_at)
    except (TypeError, ValueError):
        return recorded
    if received.tzinfo is None:
        received = received.replace(tzinfo=UTC)
    return min(received.timestamp(), recorded)
