"""The outbox's thread in a worker: every ``interval`` seconds, the messages due (waiting
and due, or ``sending`` past a lapsed claim) go to a small pool, each to
``OutboundDelivery.run`` (one attempt; the store lets one worker of the fleet open it).
An ``outbound_queued`` signal (``OutboxWake``) hands its message over at once, without
waiting for the scan or for the read model (every worker of the fleet hears it; the
store lets one attempt). A message already in this worker's pool is not handed over
twice. A failed turn (the database unavailable) is logged and the next turn tries again.

``HostSlots`` caps the SMTP connections this worker holds per host (the provider's
connection cap, else ``per_host``): an attempt waits for a slot within its own deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from application.mail.outbound.delivery import OutboundDelivery
from application.mail.outbound.ports import (
    SmtpEndpoint,
    SmtpReply,
    SmtpSubmission,
    SmtpTimeout,
    Submission,
)
from application.mail.ports import Credentials
from application.mail.providers import normalise_host
from application.signals import Signal

log = logging.getLogger("tidings.outbound")


class HostSlots:
    """An ``SmtpSubmission`` holding one of its host's slots for each attempt."""

    def __init__(self, inner: SmtpSubmission, cap: Callable[[str], int]) -> None:
        self._inner = inner
        self._cap = cap
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def _slot(self, host: str) -> threading.BoundedSemaphore:
        with self._lock:
            slot = self._slots.get(host)
            if slot is None:
                slot = self._slots[host] = threading.BoundedSemaphore(max(1, self._cap(host)))
            return slot

    def send(
        self,
        endpoint: SmtpEndpoint,
        credentials: Credentials,
        submission: Submission,
        *,
        account_id: str,
        deadline: float,
    ) -> SmtpReply:
        slot = self._slot(normalise_host(endpoint.host))
        if not slot.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise SmtpTimeout("no free connection slot for the host before the deadline")
        try:
            return self._inner.send(
                endpoint, credentials, submission, account_id=account_id, deadline=deadline
            )
        finally:
            slot.release()


class OutboxWake:
    """The messages signalled as queued since the thread last looked; a signal callback
    (it runs on the signal bus's thread: it only records and wakes)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._ids: list[str] = []
        self._lock = threading.Lock()

    def on_signal(self, signal: Signal) -> None:
        if signal.kind != "outbound_queued" or signal.outbound_id is None:
            return
        with self._lock:
            if len(self._ids) < 10_000:  # a flood waits for the scan instead
                self._ids.append(signal.outbound_id)
        self.event.set()

    def take(self) -> list[str]:
        with self._lock:
            ids, self._ids = self._ids, []
        self.event.clear()
        return ids


def run_outbound(
    delivery: OutboundDelivery,
    stop: threading.Event,
    interval: float,
    concurrency: int = 4,
    wake: OutboxWake | None = None,
) -> None:
    in_flight: set[str] = set()
    lock = threading.Lock()
    wake = wake or OutboxWake()
    next_scan = time.monotonic() + interval
    with ThreadPoolExecutor(concurrency, thread_name_prefix="outbound") as pool:
        while not stop.is_set():
            wake.event.wait(max(0.0, next_scan - time.monotonic()))
            if stop.is_set():
                return
            due = wake.take()
            if time.monotonic() >= next_scan:
                next_scan = time.monotonic() + interval
                try:
                    due += delivery.due(limit=concurrency * 4)
                except Exception as error:  # a database hiccup: the next turn retries
                    log.warning("outbound.turn_failed error=%s", type(error).__name__)
            for outbound_id in due:
                with lock:
                    if outbound_id in in_flight or len(in_flight) >= concurrency * 2:
                        continue
                    in_flight.add(outbound_id)
                future = pool.submit(delivery.run, outbound_id)
                future.add_done_callback(_finished(outbound_id, in_flight, lock))


def _finished(
    outbound_id: str, in_flight: set[str], lock: threading.Lock
) -> Callable[[Future[Any]], None]:
    def done(future: Future[Any]) -> None:
        with lock:
            in_flight.discard(outbound_id)
        error = future.exception()
        if error is not None:
            log.warning(
                "outbound.run_failed outbound_id=%s error=%s", outbound_id, type(error).__name__
            )

    return done
