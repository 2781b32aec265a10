"""``UidSearch``: which UIDs a page takes — the backfill's UIDs (searched once per
session and bound) and the windows above the cursor (``paging`` describes the rules)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import date
from typing import Any

from application.mail.ports import MailboxStatus
from infrastructure.imap.connection import Connection
from infrastructure.imap.identity import valid_id
from infrastructure.imap.plan import uid_windows

log = logging.getLogger("tidings.imap")


class UidSearch:
    def __init__(self, conn: Connection, leave_idle: Callable[[], None]) -> None:
        self._conn = conn
        self._leave_idle = leave_idle  # any command ends a running IDLE first
        # The last backfill search: ((uidvalidity, bound, since), its lower UID, UIDs).
        self._backfill: tuple[tuple[int, int, date], int, list[int]] | None = None

    def backfill_bound(self, status: MailboxStatus) -> int:
        """The highest UID a first sync backfills: everything that exists now."""
        if status.uidnext is not None:
            return status.uidnext - 1
        return max(self.search(["ALL"], floor=1), default=0)

    def backfill_uids(self, uidvalidity: int, lo: int, backfill: int, since: date) -> list[int]:
        """UIDs in ``lo..backfill`` whose INTERNALDATE is on or after ``since``. A backfill
        pages through one set of UIDs that cannot grow (new mail gets UIDs above the
        bound; dates never change), so the search runs once per session and later pages
        take the rest of its answer instead of searching the whole remainder again."""
        key = (uidvalidity, backfill, since)
        if self._backfill is None or self._backfill[0] != key or lo < self._backfill[1]:
            found = self.search(["UID", f"{lo}:{backfill}", "SINCE", since], lo)
            self._backfill = (key, lo, [u for u in found if u <= backfill])
        return [u for u in self._backfill[2] if u >= lo]

    def search(self, criteria: list[Any], floor: int) -> list[int]:
        self._leave_idle()
        found = self._conn.io(self._conn.client.search, criteria)
        uids = {u for u in found if type(u) is int and u >= floor}
        bad = [u for u in uids if not valid_id(u)]
        if bad:
            log.warning(
                "imap.skipped account_id=%s uids=%d reason=uid_out_of_range",
                self._conn.account_id,
                len(bad),
            )
        return sorted(uids.difference(bad))

    def after(self, last_uid: int, uidnext: int | None) -> tuple[list[int], bool, int]:
        """UIDs above ``last_uid``, whether windows remain unsearched, and how far we looked."""
        windows = uid_windows(last_uid + 1, uidnext, self._conn.settings.search_span)
        for i, (lo, hi) in enumerate(windows):
            uids = self.search(["UID", f"{lo}:{hi if hi is not None else '*'}"], floor=lo)
            if uids:
                return uids, i < len(windows) - 1, uids[-1]
        return [], False, (uidnext - 1) if uidnext else last_uid
