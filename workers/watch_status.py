"""Writes this worker's watch report (``policies.watch_report``) to the mailbox state,
off the loop's thread: the loop must not wait for the database.

The loop hands over a full report; only its changes since the last one are queued, and
queued changes coalesce (an account changing twice before a write is written once). One
write is in flight at a time, all queued changes in one transaction; what queued up
meanwhile goes out right after it. A failed write
keeps its changes queued (a newer change of an account wins) for the next report's
write. ``close`` clears every row this worker reported.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from application.mail.state import MailboxStateStore
from workers.policies.watch_report import WatchStatus, changes

log = logging.getLogger("tidings.watch_status")


class WatchStatusWriter:
    def __init__(self, state: MailboxStateStore, worker_id: str) -> None:
        self._state = state
        self._worker_id = worker_id
        self._written: dict[str, WatchStatus] = {}  # what the last report said (loop thread)
        self._pending: dict[str, WatchStatus | None] = {}
        self._busy = False
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="watch-status")

    def report(self, report: dict[str, WatchStatus]) -> None:
        """This worker's whole report now (loop thread)."""
        delta = changes(self._written, report)
        self._written = report
        with self._lock:
            self._pending.update(delta)
            if self._busy or not self._pending:
                return
            self._busy = True
        with contextlib.suppress(RuntimeError):  # closed
            self._pool.submit(self._flush)

    def close(self) -> None:
        """Stop writing, then clear what this worker reported (best effort)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._pending.update(dict.fromkeys(self._written))
            batch, self._pending = self._pending, {}
        self._written = {}
        try:
            self._write({a: None for a in batch})
        except Exception as error:  # an outage: the rows stay as last written
            log.warning("watch_status.unwritten error=%s", type(error).__name__)

    def _flush(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, {}
                if not batch:
                    self._busy = False
                    return
            try:
                self._write(batch)
            except Exception as error:  # an outage or a bug: keep them for the next report
                log.warning("watch_status.unwritten error=%s", type(error).__name__)
                with self._lock:
                    self._pending = {**batch, **self._pending}
                    self._busy = False
                return

    def _write(self, batch: dict[str, WatchStatus | None]) -> None:
        if batch:
            self._state.record_watches(
                self._worker_id,
                {
                    a: None if s is None else (s.watch_state, s.tier)
                    for a, s in batch.items()
                },
            )
