"""In-process signals: the single-process stand-in for Redis pub/sub."""

from __future__ import annotations

import threading
from collections.abc import Callable

from application.signals import Signal


class InProcessSignals:
    def __init__(self) -> None:
        self._subscribers: list[Callable[[Signal], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, callback: Callable[[Signal], None]) -> None:
        with self._lock:
            self._subscribers.append(callback)

    def publish(self, signal: Signal) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            callback(signal)
