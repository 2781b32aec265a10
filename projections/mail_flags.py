"""The flag columns of the mail read model's ``messages`` table: ``flags`` (JSON, sorted),
``unread`` and ``flagged`` (0/1), each of the last two indexed per account. Written
apart from the row's insert (``projections.mail`` calls these): the flags a message
arrived with (``MessageIngested.extra["flags"]``), then each ``MessageFlagsChanged``
whole, so applying an event twice or a rebuild gives the same row."""

from __future__ import annotations

import json
from collections.abc import Sequence

from application.ports import Dialect, SqlCursor
from domain.message import MessageIngested
from domain.message_flags import FLAGGED, SEEN
from projections.base import index_name

FLAG_COLUMNS = ("flags", "unread", "flagged")
_DEFINITIONS = {
    "flags": "TEXT NOT NULL DEFAULT '[]'",
    "unread": "INTEGER NOT NULL DEFAULT 1",
    "flagged": "INTEGER NOT NULL DEFAULT 0",
}


def add_flag_columns(cur: SqlCursor, dialect: Dialect, messages: str) -> None:
    """The columns where missing, each indexed per account as it is added (index names
    are unique per creation, so an index is made only with its column). Idempotent: the
    projection's ``create`` and ``upgrade`` both call it."""
    if dialect == "postgresql":
        cur.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (messages,),
        )
        present = {row[0] for row in cur.fetchall()}
    else:
        cur.execute(f"PRAGMA table_info({messages})")
        present = {row[1] for row in cur.fetchall()}
    for name, kind in _DEFINITIONS.items():
        if name in present:
            continue
        cur.execute(f"ALTER TABLE {messages} ADD COLUMN {name} {kind}")
        if name != "flags":
            cur.execute(
                f"CREATE INDEX {index_name(messages, name)} ON {messages} (account_id, {name})"
            )


def arrival_flags(events: Sequence[MessageIngested]) -> list[tuple[str, list[str]]]:
    """(message id, flags) of the messages of a run that arrived with flags."""
    return [
        (str(e.originator_id), list(e.extra["flags"]))
        for e in events
        if isinstance(e.extra.get("flags"), list) and e.extra["flags"]
    ]


def set_flags(cur: SqlCursor, messages: str, rows: Sequence[tuple[str, list[str]]]) -> None:
    """Each message's whole flag set (its row, when there is one)."""
    if rows:
        cur.executemany(
            f"UPDATE {messages} SET flags = ?, unread = ?, flagged = ? WHERE message_id = ?",
            [
                (json.dumps(flags), int(SEEN not in flags), int(FLAGGED in flags), message_id)
                for message_id, flags in rows
            ],
        )
