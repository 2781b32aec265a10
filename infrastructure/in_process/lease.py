"""In-process adapter of the ``LeaseBackend`` port: single-process mode (no ``TIDINGS_REDIS_URL``).

Same semantics as ``RedisLease``: a key maps to (token, expires_at); a key whose
``expires_at`` has passed is free; only the current token renews or releases. The clock is
injectable (``time.monotonic`` by default) so tests can move time. Thread-safe; never
raises ``LeaseBackendUnavailable``.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping


class InProcessLease:
    def __init__(
        self,
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        holder: str = "",
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._ttl_seconds = ttl_seconds
        self._holder = holder
        self._clock = clock
        self._held: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    @property
    def ttl_seconds(self) -> float:
        return self._ttl_seconds

    def _current(self, key: str, now: float) -> str | None:
        entry = self._held.get(key)
        if entry is None:
            return None
        token, expires_at = entry
        if now >= expires_at:
            del self._held[key]
            return None
        return token

    def acquire(self, key: str) -> str | None:
        with self._lock:
            now = self._clock()
            if self._current(key, now) is not None:
                return None
            token = f"{self._holder}:{secrets.token_hex(16)}"
            self._held[key] = (token, now + self._ttl_seconds)
            return token

    def acquire_many(self, keys: Iterable[str]) -> dict[str, str | None]:
        return {key: self.acquire(key) for key in dict.fromkeys(keys)}

    def renew(self, key: str, token: str) -> bool:
        return self.renew_many({key: token})[key]

    def release(self, key: str, token: str) -> bool:
        return self.release_many({key: token})[key]

    def renew_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        with self._lock:
            now = self._clock()
            answers: dict[str, bool] = {}
            for key, token in items.items():
                answers[key] = self._current(key, now) == token
                if answers[key]:
                    self._held[key] = (token, now + self._ttl_seconds)
            return answers

    def release_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        with self._lock:
            now = self._clock()
            answers: dict[str, bool] = {}
            for key, token in items.items():
                answers[key] = self._current(key, now) == token
                if answers[key]:
                    del self._held[key]
            return answers

    def held(self, keys: Iterable[str]) -> dict[str, float]:
        with self._lock:
            now = self._clock()
            return {
                key: self._held[key][1] - now for key in keys if self._current(key, now) is not None
            }

    def held_by(self, keys: Iterable[str]) -> dict[str, tuple[float, str]]:
        with self._lock:
            now = self._clock()
            return {
                key: (self._held[key][1] - now, self._held[key][0].rpartition(":")[0])
                for key in keys
                if self._current(key, now) is not None
            }

    def holders(self, keys: Iterable[str]) -> dict[str, str]:
        with self._lock:
            now = self._clock()
            return {
                key: self._held[key][0].rpartition(":")[0]
                for key in keys
                if self._current(key, now) is not None
            }
