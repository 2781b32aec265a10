"""Logins waiting for a thread of the login pool, opened in batches: the batch's reads
(the account, its secret, its cursor) are made together first, then each login goes on
alone. A fleet join's or a failover's hundreds of logins share three statements a batch
of ``OPEN_BATCH``, where each login's own three reads queued for the worker's database
connections; a lone login is a batch of one."""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

log = logging.getLogger("tidings.watch")

OPEN_BATCH = 64

W = TypeVar("W")


class LoginQueue(Generic[W]):
    def __init__(
        self,
        pool: ThreadPoolExecutor,
        account_of: Callable[[W], str],
        prepare: Callable[[list[str]], None],
        open_one: Callable[[W], None],
    ) -> None:
        self._pool = pool
        self._account_of = account_of
        self._prepare = prepare
        self._open_one = open_one
        self._lock = threading.Lock()
        self._waiting: collections.deque[W] = collections.deque()
        self._opener_queued = False  # an ``_open_batch`` is queued that will take them

    def put(self, item: W) -> None:
        with self._lock:
            self._waiting.append(item)
            queue_opener, self._opener_queued = not self._opener_queued, True
        if queue_opener:
            self._pool.submit(self._open_batch)

    def _open_batch(self) -> None:
        """Read ahead for the logins queued so far, then open them (this thread the
        first, the pool the rest). The next batch's opener queues behind these logins:
        its reads overlap their last ones, and a flood's first logins do not wait for
        every batch's reads."""
        with self._lock:
            batch = [self._waiting.popleft() for _ in range(min(OPEN_BATCH, len(self._waiting)))]
        if batch:
            try:
                self._prepare([self._account_of(item) for item in batch])
            except Exception:  # a bug of the hook's: the logins read their own
                log.exception("watch.prepare_failed accounts=%d", len(batch))
        with self._lock:
            more = self._opener_queued = bool(self._waiting)
        with contextlib.suppress(RuntimeError):  # the pool is shut down: we are closing
            for item in batch[1:]:
                self._pool.submit(self._open_one, item)
            if more:
                self._pool.submit(self._open_batch)
        if batch:
            self._open_one(batch[0])
