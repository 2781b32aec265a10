"""Single-process mode's fleet: this worker alone (no Redis)."""

from __future__ import annotations


class LocalRegistry:
    def __init__(self, worker_id: str, ttl_seconds: float) -> None:
        self._worker_id = worker_id
        self._interval = ttl_seconds / 3
        self._held = 0

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def interval(self) -> float:
        return self._interval

    def heartbeat(self, held: int, login_rate: float | None = None) -> None:
        self._held = held

    def live_workers(self) -> dict[str, int]:
        return {self._worker_id: self._held}

    def leave(self) -> None:
        self._held = 0
