"""Per-key request budgets: a token bucket for each API key. Pure; time is passed in.

Each key holds up to ``burst`` tokens and gains ``rate`` per second; a request takes
one. An empty bucket answers how long until the next token, which the API sends as
``Retry-After``. Buckets of keys unseen for a while are dropped, so memory follows the
keys in use, not every key ever presented. This bucket is one process's; with Redis
configured, ``infrastructure.redis.rate_limit`` keeps one for the whole fleet.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Protocol


class Limiter(Protocol):
    def take(self, key: str, now: float) -> float:
        """0 when the request may go ahead; else the seconds to wait (a whole number)."""
        ...


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    def __init__(self, rate: float, burst: int, *, idle_forget: float = 600.0) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        # Forget no sooner than an empty bucket takes to fill up again.
        self._idle_forget = max(idle_forget, burst / rate)
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()
        self._next_sweep = 0.0

    def take(self, key: str, now: float) -> float:
        """0 when the request may go ahead; else the seconds to wait (a whole number)."""
        with self._lock:
            self._sweep(now)
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return 0.0
            return float(max(1, math.ceil((1 - bucket.tokens) / self.rate)))

    def __len__(self) -> int:
        return len(self._buckets)

    def _sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        self._next_sweep = now + self._idle_forget
        # A bucket idle this long is full again: forgetting it changes nothing.
        stale = [k for k, b in self._buckets.items() if now - b.at >= self._idle_forget]
        for key in stale:
            del self._buckets[key]
