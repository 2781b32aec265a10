"""The outbox projection writes a message's changes that follow each other in the log
as one UPDATE, leaving every row as the updates one by one would."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from application.ports import Recorded
from domain.events import DomainEvent
from domain.outbound import (
    OutboundCopySaved,
    OutboundQueued,
    OutboundSending,
    OutboundSent,
)
from infrastructure.sql.database import SqliteDatabase
from projections.mail_outbound import COLUMNS, MailOutboundProjection

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
A, B = uuid.uuid4(), uuid.uuid4()
OWNER = {"tenant_id": "t", "account_id": "acct"}


def _queued(stream: uuid.UUID, at: datetime) -> OutboundQueued:
    return OutboundQueued(
        originator_id=stream,
        originator_version=1,
        timestamp=at,
        queued_by="u",
        digest="d",
        message_id_header="m",
        envelope="e",
        subject="s",
        content="c",
        recipients=1,
        size_bytes=10,
        **OWNER,
    )


def _sending(stream: uuid.UUID, at: datetime) -> OutboundSending:
    lease = (at + timedelta(minutes=1)).isoformat()
    return OutboundSending(
        originator_id=stream,
        originator_version=2,
        timestamp=at,
        attempt=1,
        holder="w",
        lease_until=lease,
        **OWNER,
    )


def _sent(stream: uuid.UUID, at: datetime) -> OutboundSent:
    return OutboundSent(
        originator_id=stream,
        originator_version=3,
        timestamp=at,
        attempt=1,
        reply="250 ok",
        found_in=None,
        **OWNER,
    )


def _copy(stream: uuid.UUID, at: datetime) -> OutboundCopySaved:
    return OutboundCopySaved(
        originator_id=stream, originator_version=4, timestamp=at, outcome="provider", **OWNER
    )


def _rows(tmp_path: Path, batches: list[list[DomainEvent]]) -> tuple[list[Any], int]:
    """The table after applying the batches, and the UPDATE statements it took."""
    db = SqliteDatabase(tmp_path / f"read-{len(batches)}.db")
    projection = MailOutboundProjection()
    statements: list[str] = []
    with db.transaction() as cur:
        projection.create(cur, "sqlite")
    position = 0
    for events in batches:
        recorded = []
        for event in events:
            position += 1
            recorded.append(Recorded(position, event))
        with db.transaction() as cur:
            projection.apply(_Counting(cur, statements), "sqlite", recorded)
    with sqlite3.connect(tmp_path / f"read-{len(batches)}.db") as connection:
        rows = connection.execute(
            f"SELECT {', '.join(COLUMNS)} FROM mail_outbound ORDER BY outbound_id"
        ).fetchall()
    return rows, sum(s.startswith("UPDATE") for s in statements)


class _Counting:
    def __init__(self, cur: Any, statements: list[str]) -> None:
        self._cur, self._statements = cur, statements

    def execute(self, sql: str, params: Any = ()) -> Any:
        self._statements.append(sql)
        return self._cur.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


def test_a_messages_consecutive_changes_are_one_update(tmp_path: Path) -> None:
    at = [T0 + timedelta(seconds=n) for n in range(8)]
    # As one lane writes them: n's `sent` and its copy's record with n+1's `sending`, so
    # a message's three changes follow each other in the log.
    log: list[DomainEvent] = [
        _queued(A, at[0]),
        _queued(B, at[0]),
        _sending(A, at[1]),
        _sent(A, at[2]),
        _copy(A, at[2]),
        _sending(B, at[2]),
        _sent(B, at[3]),
        _copy(B, at[3]),
    ]
    merged, updates = _rows(tmp_path, [log])
    one_by_one, singles = _rows(tmp_path, [[event] for event in log])
    assert merged == one_by_one
    assert (updates, singles) == (2, 6)
    assert {row[3] for row in merged} == {"sent"}
    assert {row[15] for row in merged} == {"provider"}


def test_changes_apart_in_the_log_stay_apart(tmp_path: Path) -> None:
    at = [T0 + timedelta(seconds=n) for n in range(4)]
    log: list[DomainEvent] = [
        _queued(A, at[0]),
        _queued(B, at[0]),
        _sending(A, at[1]),
        _sending(B, at[1]),
        _sent(A, at[2]),
        _queued(uuid.UUID(int=0), at[2]),
        _copy(A, at[3]),
    ]
    merged, updates = _rows(tmp_path, [log])
    assert merged == _rows(tmp_path, [[event] for event in log])[0]
    assert updates == 4
