"""Group commit: many threads hand in work, one thread commits it in batches.

When a burst of new mail reaches thousands of watched accounts at once, writing each
account's page on its own (an append, a cursor write) makes the database round trips
the bottleneck. Here the pages queue up while the previous batch is being written and
go in together: one append and one cursor write per batch however many accounts are
in it. No timer holds a lone page back: a batch is whatever queued meanwhile.

``submit`` answers with a future: each item's own result once its batch is written.
``commit`` must give one result per item and never raise, and an item it cannot store
must fail alone (``MailIngestion.store_apart`` retries each page of a failed batch on its
own); should it raise after all, ``failed`` gives the items' results. Callbacks added to
the futures run on the committer thread and must be quick (hand real work to another
thread).

Invariant: every future of an item taken from the queue is resolved, with a result,
exactly once; ``close`` writes what was queued before it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

log = logging.getLogger("tidings.committer")

T = TypeVar("T")
R = TypeVar("R")
_STOP = object()


class GroupCommitter(Generic[T, R]):
    def __init__(
        self,
        commit: Callable[[Sequence[T]], list[R]],
        failed: Callable[[T, Exception], R],
        *,
        max_batch: int = 500,
        name: str = "group-commit",
    ) -> None:
        self._commit = commit
        self._failed = failed  # an item's result when ``commit`` raised after all
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> Future[R]:
        """Queue ``item``; the future answers with its result once its batch is written."""
        answer: Future[R] = Future()
        self._queue.put((item, answer))
        return answer

    def close(self, timeout: float = 5.0) -> None:
        """Commit what is queued, then stop."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            entry = self._queue.get()
            batch: list[tuple[T, Future[R]]] = []
            while True:
                if entry is _STOP:
                    stopping = True
                    break
                batch.append(entry)  # type: ignore[arg-type]
                if len(batch) >= self._max_batch:
                    break
                try:
                    entry = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._write(batch)

    def _write(self, batch: list[tuple[T, Future[R]]]) -> None:
        items = [item for item, _ in batch]
        try:
            results = self._commit(items)
        except Exception as error:  # a bug in commit: fail this batch, keep the thread
            log.exception("committer.crashed batch=%d", len(batch))
            results = [self._failed(item, error) for item in items]
        for (_, answer), result in zip(batch, results, strict=True):
            answer.set_result(result)  # a failing callback is logged by the future itself
