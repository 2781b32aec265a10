"""Group commit of the app layer: concurrent appends share one transaction.

Every write transaction pays a fixed price however few events it holds: on PostgreSQL the
table lock, a ``NOTIFY`` and a commit (WAL flush); on SQLite the one writer's turn and a
commit. Callers that append while another caller's transaction is in flight queue up,
and the next transaction takes them all.

No thread of its own (nothing to die, nothing to restart): the first caller to find no
writer becomes the leader and writes the queue, its own entry first; when its batch is
done it answers every caller of the batch and hands the lead to the oldest entry still
queued, which writes the next batch in its own thread. A lone caller leads a batch of
one, so the single-threaded path is the plain append plus a lock and a queue.

An outage is shared: when a batch fails with one of ``outages`` (the database is gone),
every caller queued meanwhile gets the same failure at once instead of waiting through
another round of the store's retries, so no caller waits longer than one batch's.

Invariants: at most one batch of this process is being written at any time; an entry
is answered exactly once (an outcome, or an exception its caller raises) and every
queued entry is answered or leads eventually, whatever ``write`` raises; while the
queue is not empty, some entry leads. A caller interrupted while queued takes its entry
out and, if it had been chosen to lead, hands the lead on.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger("tidings.group_commit")


class Entry(Generic[T]):
    """One caller's work and, once written, its own outcome (``error`` None: stored)."""

    __slots__ = ("_wake", "answered", "batch", "error", "item", "promoted", "size")

    def __init__(self, item: T, size: int) -> None:
        self.item = item
        self.size = size
        self.error: BaseException | None = None
        self.batch = 0  # the number of the batch that wrote it
        self.answered = False
        self.promoted = False  # chosen to lead the next batch
        self._wake = threading.Lock()
        self._wake.acquire()  # released once: answered, or promoted to lead


class GroupCommit(Generic[T]):
    """``write(batch)`` stores a batch and sets each entry's ``error`` where it failed;
    it runs in the leading caller's thread, one batch at a time."""

    def __init__(
        self,
        write: Callable[[Sequence[Entry[T]]], None],
        max_size: int = 2000,
        outages: tuple[type[Exception], ...] = (),
        after: Callable[[Sequence[Entry[T]]], None] | None = None,
    ) -> None:
        self._write = write
        self._after = after  # runs in the leading thread before the batch is answered
        self.batches = 0  # batches written (each entry learns its batch's number)
        self._max_size = max_size  # a batch's total size; one entry may exceed it alone
        self._outages = outages
        self._mutex = threading.Lock()
        self._queue: deque[Entry[T]] = deque()
        self._leading = False

    def submit(self, item: T, size: int = 1) -> int:
        """Store ``item`` with whatever else is queued; raise its own failure. Answers
        the number of the batch that wrote it."""
        entry = Entry(item, size)
        with self._mutex:
            self._queue.append(entry)
            lead = not self._leading
            self._leading = True
        if not lead:
            try:
                entry._wake.acquire()
            except BaseException:  # interrupted while queued (Ctrl-C): leave, and hand on
                self._abandon(entry)
                raise
        if not entry.answered:
            self._lead()
        if entry.error is not None:
            raise entry.error
        return entry.batch

    def _abandon(self, entry: Entry[T]) -> None:
        """Take a caller that stopped waiting out of the queue; should it have been chosen
        to lead meanwhile, the lead goes to the next entry, so nobody waits for it."""
        with self._mutex:
            if entry not in self._queue:
                return  # taken into a batch already: that batch is written as it is
            self._queue.remove(entry)
            if not entry.promoted:
                return
            successor = self._queue[0] if self._queue else None
            self._leading = successor is not None
            if successor is not None:
                successor.promoted = True
        if successor is not None:
            successor._wake.release()

    def _take(self) -> list[Entry[T]]:
        with self._mutex:
            batch = [self._queue.popleft()]
            size = batch[0].size
            while self._queue and size + self._queue[0].size <= self._max_size:
                entry = self._queue.popleft()
                size += entry.size
                batch.append(entry)
            return batch

    def _written(self, batch: list[Entry[T]]) -> None:
        """Number the batch (one at a time: only the leading thread counts), then run
        ``after`` before its callers are answered."""
        self.batches += 1
        for entry in batch:
            entry.batch = self.batches
        if self._after is not None:
            try:
                self._after(batch)
            except Exception:  # the batch is written: its callers get their outcomes
                log.exception("group_commit.after_failed")

    def _lead(self) -> None:
        batch = self._take()
        try:
            self._write(batch)
        except BaseException as error:  # a bug in write: this batch fails, the lead moves on
            for entry in batch:
                entry.error = entry.error or error
        self._written(batch)
        outage = next((e.error for e in batch if isinstance(e.error, self._outages)), None)
        drained: list[Entry[T]] = []
        with self._mutex:
            if outage is not None:
                drained = list(self._queue)
                self._queue.clear()
            successor = self._queue[0] if self._queue else None
            self._leading = successor is not None
            if successor is not None:
                successor.promoted = True
        for entry in drained:
            assert outage is not None
            entry.error = type(outage)(*outage.args)  # each caller raises its own instance
        for entry in (*batch[1:], *drained):
            entry.answered = True
            entry._wake.release()
        batch[0].answered = True
        if successor is not None:
            successor._wake.release()
