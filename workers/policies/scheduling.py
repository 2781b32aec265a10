"""A due-time scheduler for per-account work (next poll, next restart), thousands of keys.

State: ``key -> (due, seq)`` for every scheduled key, and a heap of ``(due, seq, key)``
entries that may hold stale ones (lazy deletion).

    (unscheduled) --schedule(key, at)--> scheduled(at)
    scheduled(a) --schedule(key, b)--> scheduled(b)          (only_earlier: b only if b < a)
    scheduled --cancel / pop_due once due--> (unscheduled)

Invariants: a key is scheduled at most once (rescheduling replaces); a heap entry is live
iff its ``seq`` is the key's current one; ``pop_due`` returns each due key once, in due
order (ties: scheduling order); schedule is O(log n), cancel O(1), pop O(log n)
amortised; stale entries are compacted away when they outnumber the live ones, so the
heap stays O(live keys).
"""

from __future__ import annotations

import heapq
import itertools
import zlib
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


def first_poll_at(account_id: str, now: float, spread: float = 2.0) -> float:
    """An account's first poll after this worker first sees it: within ``spread`` seconds,
    at a fixed offset per account (no RNG to seed), so a restart does not log in
    everywhere at once."""
    return now + spread * (zlib.crc32(account_id.encode()) % 2000) / 2000


class DueScheduler(Generic[K]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K]] = []
        self._due: dict[K, tuple[float, int]] = {}
        self._seq = itertools.count()

    def schedule(self, key: K, at: float, *, only_earlier: bool = False) -> bool:
        """Schedule (or move) ``key`` to ``at``. With ``only_earlier``, a key already due
        sooner stays put. True when the key's due time changed."""
        current = self._due.get(key)
        if current is not None and (current[0] == at or (only_earlier and current[0] <= at)):
            return False
        seq = next(self._seq)
        self._due[key] = (at, seq)
        heapq.heappush(self._heap, (at, seq, key))
        self._compact()
        return True

    def cancel(self, key: K) -> bool:
        if self._due.pop(key, None) is None:
            return False
        self._compact()
        return True

    def due_at(self, key: K) -> float | None:
        current = self._due.get(key)
        return current[0] if current is not None else None

    def next_due(self) -> float | None:
        self._drop_stale_head()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float, limit: int | None = None) -> list[K]:
        """Unschedule and return the keys due at ``now`` (earliest first, at most ``limit``)."""
        due: list[K] = []
        while limit is None or len(due) < limit:
            self._drop_stale_head()
            if not self._heap or self._heap[0][0] > now:
                break
            _, _, key = heapq.heappop(self._heap)
            del self._due[key]
            due.append(key)
        return due

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def _live(self, entry: tuple[float, int, K]) -> bool:
        current = self._due.get(entry[2])
        return current is not None and current[1] == entry[1]

    def _drop_stale_head(self) -> None:
        while self._heap and not self._live(self._heap[0]):
            heapq.heappop(self._heap)

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [entry for entry in self._heap if self._live(entry)]
            heapq.heapify(self._heap)
