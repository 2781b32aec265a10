"""A series reads an account's due messages page by page from its place in the queue
(``OutboxReader.due_of_account`` with ``after``): every due row once, oldest queued
first, ties on ``queued_at`` ordered by id, other accounts' and settled rows never."""

from __future__ import annotations

from pathlib import Path

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
