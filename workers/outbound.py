"""The outbox's thread in a worker: every ``interval`` seconds, the messages due (waiting
and due, ``sending`` past a lapsed claim, a Sent copy to retry) go to a small pool, one
series per account (``OutboundDelivery.run_series``: the account's messages one after
another over its kept SMTP connection). A message of an account whose series is running
joins that series; the others start one, at most ``concurrency`` at once (the rest wait
for a thread). An ``outbound_queued`` signal (``OutboxWake``) hands its message over at
once, without waiting for the scan or for the read model. A failed turn (the database
unavailable) is logged and the next turn tries again. Every turn closes kept
connections idle past their time; stopping closes them all.

Which workers hear a signal: every worker of the fleet, and each tries the message;
the store lets one open the attempt. The others' cost is one load of a short stream
and one refused append (the version check, no SMTP), about a millisecond each, per
message and worker: cheap beside the send itself for the fleets this serves (a few
workers). A larger fleet would route the signal by account (the watch owner's rule).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from application.mail.outbound.delivery import SERIES_LIMIT, OutboundDelivery
from application.signals import Signal

log = logging.getLogger("tidings.outbound")
MAX_WAITING = 10_000  # messages handed over and not yet taken; past it the scan finds them


class OutboxWake:
    """The messages signalled as queued since the thread last looked; a signal callback
    (it runs on the signal bus's thread: it only records and wakes)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._ids: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def on_signal(self, signal: Signal) -> None:
        if signal.kind != "outbound_queued" or signal.outbound_id is None:
            return
        if signal.account_id is None:
            return
        with self._lock:
            if len(self._ids) < MAX_WAITING:  # a flood waits for the scan instead
                self._ids.append((signal.outbound_id, signal.account_id))
        self.event.set()

    def take(self) -> list[tuple[str, str]]:
        with self._lock:
            ids, self._ids = self._ids, []
        self.event.clear()
        return ids


class Series:
    """The accounts whose series is running and what waits for each (loop thread and
    pool threads, under one lock)."""

    def __init__(self) -> None:
        self._waiting: dict[str, deque[str]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)

    def hand(self, account_id: str, outbound_id: str, most: int = MAX_WAITING) -> bool:
        """Give a message to its account's running series; True: a new series starts
        (unless ``most`` series are running or waiting: then the scan finds it later)."""
        with self._lock:
            waiting = self._waiting.get(account_id)
            if waiting is not None:
                if outbound_id not in waiting and len(waiting) < MAX_WAITING:
                    waiting.append(outbound_id)
                return False
            if len(self._waiting) >= most:
                return False
            self._waiting[account_id] = deque([outbound_id])
            return True

    def reopen(self, account_id: str, waiting: list[str]) -> None:
        """A new series for the account, with what waits for it (maybe nothing: it
        finds its messages in the read model)."""
        with self._lock:
            self._waiting[account_id] = deque(waiting)

    def taker(self, account_id: str) -> Callable[[], str | None]:
        def take() -> str | None:
            with self._lock:
                waiting = self._waiting.get(account_id)
                return waiting.popleft() if waiting else None

        return take

    def end(self, account_id: str) -> list[str]:
        """The series is over: what was handed to it and not taken (started again)."""
        with self._lock:
            return list(self._waiting.pop(account_id, ()))


def run_outbound(
    delivery: OutboundDelivery,
    stop: threading.Event,
    interval: float,
    concurrency: int = 4,
    wake: OutboxWake | None = None,
) -> None:
    series = Series()
    wake = wake or OutboxWake()
    next_scan = time.monotonic()  # at once: what waited while no worker ran
    try:
        with ThreadPoolExecutor(concurrency, thread_name_prefix="outbound") as pool:

            def start(account_id: str) -> None:
                future = pool.submit(
                    delivery.run_series,
                    account_id,
                    series.taker(account_id),
                    stopping=stop.is_set,
                )
                future.add_done_callback(_finished(account_id, series, start))

            while not stop.is_set():
                wake.event.wait(max(0.0, next_scan - time.monotonic()))
                if stop.is_set():
                    return
                due = wake.take()
                if time.monotonic() >= next_scan:
                    next_scan = time.monotonic() + interval
                    try:
                        due += delivery.due_by_account(limit=concurrency * 4)
                    except Exception as error:  # a database hiccup: the next turn retries
                        log.warning("outbound.turn_failed error=%s", type(error).__name__)
                for outbound_id, account_id in due:
                    if series.hand(account_id, outbound_id, most=concurrency * 2):
                        start(account_id)
                _close_idle(delivery)
    finally:
        _close_all(delivery)


def _finished(
    account_id: str, series: Series, start: Callable[[str], None]
) -> Callable[[Future[Any]], None]:
    def done(future: Future[Any]) -> None:
        error = future.exception()
        if error is not None:
            log.warning(
                "outbound.series_failed account_id=%s error=%s", account_id, type(error).__name__
            )
        left = series.end(account_id)
        if error is not None:
            return
        # Handed over as the series ended, or the series used its turn (more may wait):
        # a new one, behind the other accounts' waiting series.
        if left or future.result() >= SERIES_LIMIT:
            series.reopen(account_id, left)
            try:
                start(account_id)
            except RuntimeError:  # the pool is shutting down: the next scan finds them
                series.end(account_id)

    return done


def _close_idle(delivery: OutboundDelivery) -> None:
    try:
        delivery.close_idle()
    except Exception as error:  # a socket error closing: never the loop's end
        log.warning("outbound.close_idle_failed error=%s", type(error).__name__)


def _close_all(delivery: OutboundDelivery) -> None:
    try:
        delivery.close()
    except Exception as error:
        log.warning("outbound.close_failed error=%s", type(error).__name__)
