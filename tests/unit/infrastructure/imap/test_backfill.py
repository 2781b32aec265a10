"""First-sync backfill in ``fetch_since``: mail older than the window is skipped for
good wherever its UID lies, across pages and without UIDNEXT."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from application.mail.ports import FetchBatch, MailboxCursor
from infrastructure.imap.session import ImapMailboxSession
from tests.unit.infrastructure.imap.test_session import FakeClient, raw, session

SINCE = date(2024, 1, 1)


class DatedClient(FakeClient):
    """Honours ``SINCE`` (per-UID internal dates) and ``ALL`` in searches."""

    def __init__(self, dates: dict[int, date], uidnext: int | None) -> None:
        super().__init__({uid: raw(uid) for uid in dates}, uidnext=uidnext)
        self.dates = dates
        self.searches: list[list[Any]] = []

    def search(self, criteria: list[Any]) -> list[int]:
        self.searches.append(list(criteria))
        if criteria == ["ALL"]:
            self.calls.append("search")
            return sorted(self.messages)
        if "SINCE" in criteria:
            since = criteria[criteria.index("SINCE") + 1]
            found = super().search(criteria[:2]) if criteria[0] == "UID" else sorted(self.messages)
            return [u for u in found if self.dates[u] >= since]
        return super().search(criteria)


def drain(s: ImapMailboxSession, limit: int) -> tuple[list[FetchBatch], MailboxCursor]:
    batches: list[FetchBatch] = []
    cursor: MailboxCursor | None = None
    while True:
        batch = s.fetch_since(cursor, backfill_since=SINCE, limit=limit)
        batches.append(batch)
        cursor = batch.new_cursor
        if not batch.has_more:
            return batches, cursor


NEW, OLD = date(2024, 2, 1), date(2020, 1, 1)


@pytest.mark.parametrize("uidnext", [9, None])
@pytest.mark.parametrize("limit", [1, 2, 10])
def test_old_mail_between_and_after_new_mail_is_never_taken(
    tmp_path: Path, uidnext: int | None, limit: int
) -> None:
    dates = {1: OLD, 2: NEW, 3: OLD, 4: OLD, 5: NEW, 6: NEW, 7: OLD, 8: OLD}
    client = DatedClient(dates, uidnext)
    s = session(client, tmp_path)
    batches, cursor = drain(s, limit)
    assert [m.uid for b in batches for m in b.messages] == [2, 5, 6]
    assert cursor == MailboxCursor(7, 8, None)
    assert all(b.new_cursor.backfill_until == (8 if b.has_more else None) for b in batches)
    # Later passes take only what arrives after the backfill, whatever its date.
    client.messages[9], client.dates[9] = raw(9), OLD
    client.uidnext = None if uidnext is None else 10
    later = s.fetch_since(cursor, backfill_since=SINCE, limit=limit)
    assert [m.uid for m in later.messages] == [9] and later.new_cursor.last_uid == 9


def test_a_mailbox_with_only_old_mail_is_done_in_one_call(tmp_path: Path) -> None:
    client = DatedClient({1: OLD, 2: OLD}, uidnext=3)
    batch = session(client, tmp_path).fetch_since(None, backfill_since=SINCE, limit=5)
    assert batch.messages == () and not batch.has_more
    assert batch.new_cursor == MailboxCursor(7, 2, None)
