"""Keeping CPython's cyclic garbage collector off a worker's long-lived objects.

A worker holds thousands of objects that live as long as their watch: a session, its
imaplib connection, socket and buffers, the account. CPython's full collection walks
every one of them with the GIL held, and its trigger (survivors since the last full one
reach a quarter of the heap) fires on exactly the moment a worker is busiest: a burst of
new mail promotes thousands of in-flight pages, and a full collection then walks the
whole heap to free next to nothing (docs/decisions/gc-freezing.md).

- The youngest generation is collected every 10,000 net allocations instead of 700: what
  a page allocates dies young, by reference counting, before a collection looks at it.
- Every ``freeze_every`` the survivors are frozen (``gc.freeze``, O(1)): moved where no
  collection looks again. Often, because it costs nothing and the worker makes almost no
  cyclic garbage to strand.
- Every ``thaw_every`` everything is thawed, collected once and frozen again, so cycles
  among frozen objects (a stopped watch's, should it leave any) live at most that long.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

log = logging.getLogger("tidings.heap")

YOUNG_THRESHOLD = 10_000


class Collector(Protocol):
    """The parts of the ``gc`` module this uses (a fake in the policy's tests)."""

    def set_threshold(
        self, threshold0: int, threshold1: int = ..., threshold2: int = ...
    ) -> None: ...

    def get_threshold(self) -> tuple[int, int, int]: ...

    def freeze(self) -> None: ...

    def unfreeze(self) -> None: ...

    def collect(self) -> int: ...


class HeapKeeper:
    def __init__(
        self,
        *,
        freeze_every: float = 10.0,
        thaw_every: float = 3600.0,
        collector: Collector = gc,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gc = collector
        self._clock = clock
        self._freeze_every = freeze_every
        self._thaw_every = thaw_every
        self._next_freeze = self._next_thaw = 0.0

    def start(self) -> None:
        """Raise the young generation's threshold; the first freeze comes with the first
        ``step`` after ``freeze_every`` (startup's objects are frozen with the first
        watches')."""
        _, older, oldest = self._gc.get_threshold()
        self._gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
        now = self._clock()
        self._next_freeze = now + self._freeze_every
        self._next_thaw = now + self._thaw_every

    def step(self) -> float:
        """Freeze or thaw-collect-freeze when due; seconds until the next step is due."""
        now = self._clock()
        if now >= self._next_thaw:
            self._gc.unfreeze()
            collected = self._gc.collect()
            if collected:
                log.info("heap.cycles_collected objects=%d", collected)
            self._gc.freeze()
            self._next_thaw = now + self._thaw_every
            self._next_freeze = now + self._freeze_every
        elif now >= self._next_freeze:
            self._gc.freeze()
            self._next_freeze = now + self._freeze_every
        return max(0.0, min(self._next_freeze, self._next_thaw) - now)

    def run(self, stop: threading.Event) -> None:
        """``start``, then ``step`` until ``stop`` is set (a worker's daemon thread)."""
        self.start()
        while not stop.wait(self.step()):
            pass


@contextmanager
def kept_heap() -> Iterator[None]:
    """A worker's heap policy for a long batch command of its own process (``projections
    run`` and ``rebuild``): a page of 5,000 events promotes its objects while it is
    applied, and full collections then walk the whole heap page after page (a fifth to a
    quarter of a rebuild's CPU). The collector's settings are restored at the end."""
    before = gc.get_threshold()
    stop = threading.Event()
    keeper = threading.Thread(target=HeapKeeper().run, args=(stop,), name="heap", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()
        gc.unfreeze()
        gc.set_threshold(*before)
