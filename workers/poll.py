"""The reconciliation poll: every syncable account, a bounded number at a time.

Invariants: at most ``concurrency`` accounts sync at once; an account still syncing
(from an earlier tick, or past its deadline and not yet returned) is skipped by the
next tick, never joined; one account's failure never stops the others; an account
past its deadline counts as a transient failure for this pass. A poll's deadline runs
from when it starts, not from when it was asked for; the supervisor asks for no more
than ``free_slots`` (its schedule holds the rest, so a backlog never waits here, where
neither ownership nor deadlines are looked at again).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from application import worker_defaults as defaults
from application.mail.state import ErrorKind
from application.mail.sync_outcome import SyncOutcome

log = logging.getLogger("tidings.poll")

SyncFn = Callable[[str, float], SyncOutcome]


class Poller:
    def __init__(
        self,
        sync: SyncFn,
        concurrency: int = defaults.POLL_CONCURRENCY,
        deadline_seconds: float = defaults.POLL_DEADLINE,
    ) -> None:
        self._sync = sync
        self._deadline_seconds = deadline_seconds
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="poll")
        self._concurrency = concurrency
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()

    def _run(self, account_id: str, deadline: float | None) -> SyncOutcome:
        if deadline is None:
            deadline = time.monotonic() + self._deadline_seconds
        try:
            return self._sync(account_id, deadline)
        except Exception as error:  # a bug in one account's sync must not stop the pass
            log.exception("sync.crashed account_id=%s error=%s", account_id, type(error).__name__)
            return SyncOutcome(account_id, error_kind=ErrorKind.CRASH)
        finally:
            with self._lock:
                self._in_flight.discard(account_id)

    def free_slots(self) -> int:
        """Polls that can start now without queueing (a poll past its deadline still
        holds its thread until its session ends it)."""
        with self._lock:
            return max(self._concurrency - len(self._in_flight), 0)

    def submit(self, account_id: str, on_done: Callable[[SyncOutcome], None]) -> bool:
        """Start one account's poll in the background, unless it is still syncing."""
        with self._lock:
            if account_id in self._in_flight:
                return False
            self._in_flight.add(account_id)
        future = self._pool.submit(self._run, account_id, None)

        def report(done: Future[SyncOutcome]) -> None:
            if not done.cancelled():  # cancelled: the worker is closing, nobody waits
                on_done(done.result())

        future.add_done_callback(report)
        return True

    def poll(
        self, account_ids: Iterable[str], on_done: Callable[[SyncOutcome], None] | None = None
    ) -> list[SyncOutcome]:
        """One pass: returns when every account it started has finished or timed out."""
        outcomes: list[SyncOutcome] = []
        pending: dict[Future[SyncOutcome], tuple[str, float]] = {}
        queue = list(account_ids)
        while queue or pending:
            while queue and len(pending) < self._concurrency:
                account_id = queue.pop(0)
                with self._lock:
                    if account_id in self._in_flight:
                        continue  # still syncing from before: skip, never join
                    self._in_flight.add(account_id)
                deadline = time.monotonic() + self._deadline_seconds
                pending[self._pool.submit(self._run, account_id, deadline)] = (account_id, deadline)
            if not pending:
                break
            nearest = min(deadline for _, deadline in pending.values())
            done, _ = wait(
                pending,
                timeout=max(nearest - time.monotonic(), 0) + 1.0,
                return_when=FIRST_COMPLETED,
            )
            now = time.monotonic()
            for future in list(pending):
                account_id, deadline = pending[future]
                if future in done:
                    outcome = future.result()
                elif now > deadline + 1.0:
                    # It goes on in its thread (its session's deadline ends it) and
                    # stays in flight, so the next tick skips it.
                    outcome = SyncOutcome(account_id, error_kind=ErrorKind.TIMEOUT)
                    log.warning("sync.deadline account_id=%s", account_id)
                else:
                    continue
                del pending[future]
                outcomes.append(outcome)
                if on_done is not None:
                    on_done(outcome)
        return outcomes

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
