"""A series reads an account's due messages page by page from its place in the queue
(``OutboxReader.due_of_account`` with ``after``): every due row once, oldest queued
first, ties on ``queued_at`` ordered by id, other accounts' and settled rows never."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch

from application.mail.outbound.ports import DuePlace
from infrastructure.sql.database import SqliteDatabase
from projections.mail_outbound import MailOutboundProjection
from projections.mail_outbound_reader import OutboxReader

NOW = "2026-12-05T12:00:00+00:00"


def _reader(tmp_path: Path, rows: list[tuple[str, str, str, str]]) -> OutboxReader:
    db = SqliteDatabase(tmp_path / "read.db")
    projection = MailOutboundProjection()
    table = projection.tables["outbound"]
    with db.transaction() as cur:
        projection.create(cur, "sqlite")
        for outbound_id, account_id, state, queued_at in rows:
            cur.execute(
                f"INSERT INTO {table} (outbound_id, tenant_id, account_id, state, subject,"
                " recipients, size_bytes, attempts, queued_by, queued_at, updated_at)"
                " VALUES (?, 't', ?, ?, 's', 1, 1, 0, 'u', ?, ?)",
                (outbound_id, account_id, state, queued_at, queued_at),
            )
    return OutboxReader(db)


def test_pages_read_each_due_row_once_in_queue_order(tmp_path: Path) -> None:
    rows = [
        (f"m{n:02d}", "a", "sent" if n % 5 == 0 else "queued", f"2026-12-05T11:00:{n // 3:02d}")
        for n in range(30)
    ]
    rows += [("other", "b", "queued", "2026-12-05T11:00:05")]
    reader = _reader(tmp_path, rows[::-1])  # inserted newest first
    expected = [r[0] for r in rows if r[1] == "a" and r[2] == "queued"]
    read: list[str] = []
    place: DuePlace | None = None
    while page := reader.due_of_account("a", NOW, 4, place):
        assert len(page) <= 4
        read += [row.outbound_id for row in page]
        place = page[-1]
    assert read == expected


def test_a_place_past_every_row_reads_nothing(tmp_path: Path) -> None:
    reader = _reader(tmp_path, [("m1", "a", "queued", "2026-12-05T11:00:00")])
    assert reader.due_of_account("a", NOW, 16) == [DuePlace("2026-12-05T11:00:00", "m1")]
    assert reader.due_of_account("a", NOW, 16, DuePlace("2026-12-05T11:00:00", "m1")) == []


def test_every_due_state_is_in_the_due_index(tmp_path: Path) -> None:
    rows = [
        ("queued", "a", "queued", "2026-12-05T11:00:01"),
        ("retrying", "a", "retrying", "2026-12-05T11:00:02"),
        ("sending", "a", "sending", "2026-12-05T11:00:03"),
        ("copy", "a", "sent", "2026-12-05T11:00:04"),
        ("sent", "a", "sent", "2026-12-05T11:00:05"),
        ("failed", "a", "failed", "2026-12-05T11:00:06"),
    ]
    reader = _reader(tmp_path, rows)
    with reader._db.transaction() as cur:  # times that make each of the four due
        cur.execute(
            "UPDATE mail_outbound SET next_attempt_at = '2026-12-05T11:30:00',"
            " lease_until = '2026-12-05T11:30:00'"
        )
        cur.execute("UPDATE mail_outbound SET sent_copy = 'retrying' WHERE outbound_id = 'copy'")
        cur.execute("UPDATE mail_outbound SET sent_copy = 'provider' WHERE outbound_id = 'sent'")
    first = reader.due_of_account("a", NOW, 2)
    rest = reader.due_of_account("a", NOW, 16, first[-1])
    assert [r.outbound_id for r in first + rest] == ["queued", "retrying", "sending", "copy"]


def test_a_page_searches_the_due_index_from_its_place(tmp_path: Path) -> None:
    """The account's settled rows are never walked: a page starts at its place in an
    index of due rows alone."""
    reader = _reader(tmp_path, [("m1", "a", "queued", "2026-12-05T11:00:00")])
    connection = sqlite3.connect(tmp_path / "read.db")
    statements: list[str] = []
    connection.set_trace_callback(statements.append)
    place = DuePlace("2026-12-05T10:00:00", "m0")
    # The reader's own statement, as SQLite receives it, planned here.
    with patch.object(reader, "_db", _Tracing(connection)):
        assert reader.due_of_account("a", NOW, 16, place) == [DuePlace("2026-12-05T11:00:00", "m1")]
    page = next(s for s in statements if "FROM mail_outbound" in s)
    plan = " ".join(str(row[3]) for row in connection.execute(f"EXPLAIN QUERY PLAN {page}"))
    assert "USING INDEX ix_mail_outbound_account_due" in plan, plan
    assert "(queued_at,outbound_id)>(?,?)" in plan, plan


class _Tracing:
    """A database whose reads run on one plain connection (its trace shows the SQL)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Cursor]:
        yield self._connection.cursor()
