"""Mail retention in the mail read model: the ``body_erased`` column, the sweep's indexes
and what ``MessageBodyErased`` / ``MessageExpired`` do to a message's row.

``MessageBodyErased`` clears the row's body ref and snippet and sets ``body_erased``;
``MessageExpired`` does the same and sets ``state`` to ``deleted`` (thread and counts stay,
as for a vanished body). A run of them is written set-wise: the erasure of a message and
the expiry of the same one cannot both be in one run out of order, since the expiry only
sets more (the state) and clears the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from application.ports import Dialect, SqlCursor
from domain.message_retention import MessageBodyErased, MessageExpired
from projections.base import index_name

CHUNK = 500  # message ids per statement (well under either dialect's bound variables)
BODY_ERASED_COLUMN = "body_erased INTEGER NOT NULL DEFAULT 0"

# What each mail retention stage still has to do (``projections.mail_expiry_reader``).
RETENTION_PENDING = {
    "bodies": "body_erased = 0 AND body_ref IS NOT NULL AND state <> 'deferred'",
    "messages": "state <> 'deleted' AND state <> 'deferred'",
}


def create_retention_indexes(cur: SqlCursor, messages: str) -> None:
    """The mail retention sweep's walks: per stage, the rows it still has to do."""
    for stage, pending in RETENTION_PENDING.items():
        cur.execute(
            f"CREATE INDEX {index_name(messages, f'due_{stage}')}"
            f" ON {messages} (tenant_id, received_at, message_id) WHERE {pending}"
        )


def upgrade_body_erased(cur: SqlCursor, dialect: Dialect, messages: str) -> None:
    """The column and the sweep's indexes, once (index names are unique per creation, so
    they are made only with the column); no body was erased before: 0."""
    if dialect == "postgresql":
        cur.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = ? AND column_name = 'body_erased'",
            (messages,),
        )
        present = cur.fetchone() is not None
    else:
        cur.execute(f"PRAGMA table_info({messages})")
        present = "body_erased" in {row[1] for row in cur.fetchall()}
    if not present:
        cur.execute(f"ALTER TABLE {messages} ADD COLUMN {BODY_ERASED_COLUMN}")
        create_retention_indexes(cur, messages)


def retire(
    cur: SqlCursor, messages: str, events: Sequence[MessageBodyErased | MessageExpired]
) -> None:
    """Bodies gone (ref and snippet cleared), or messages too: a run of events in one
    statement per kind and chunk (a sweep's batch is one run)."""
    for kind, state in ((MessageBodyErased, ""), (MessageExpired, ", state = 'deleted'")):
        ids = [str(e.originator_id) for e in events if isinstance(e, kind)]
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start : start + CHUNK]
            cur.execute(
                f"UPDATE {messages} SET body_ref = NULL, snippet = '', body_erased = 1{state}"
                f" WHERE message_id IN ({', '.join('?' for _ in chunk)})",
                chunk,
            )
