"""What the watch manager (``workers.watch``) keeps per watch, and what it calls back: a
watch's state and timers (``Watch``), the hooks the watch path's ingestion answers
(``WatchHooks``, ``workers.watch_ingest``), and what it counts for the metrics
(``WatchCounters``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal, Protocol

from application.mail.ports import MailboxSession
from application.mail.sync_outcome import SyncOutcome
from workers.policies.login_rate import LoginRate
from workers.policies.watch_stops import WhyStopped

State = Literal["opening", "parked", "idling", "fetching", "refreshing", "stopped"]


class WatchHooks(Protocol):
    def prepare(self, account_ids: list[str]) -> None:
        """Logins of these accounts start now: read what they need together (never
        raises: a login that finds nothing read reads its own)."""
        ...

    def open_session(self, account_id: str) -> MailboxSession: ...

    def sync(self, account_id: str, session: MailboxSession) -> Future[SyncOutcome]:
        """Fetch the next page on this thread; the future answers (on any thread) once
        the page is ingested."""
        ...

    def watch_folders(self, account_id: str, session: MailboxSession) -> None:
        """Ask the session's server to push the account's other synced folders (NOTIFY),
        where it can; called after login and again when asked (``refresh_folders``)."""
        ...

    def on_stopped(
        self,
        account_id: str,
        generation: int,
        reason: WhyStopped,
        error: BaseException | None,
        lived: float,
    ) -> None: ...

    def on_mail(self, account_id: str, outcome: SyncOutcome) -> None: ...

    def on_folders_changed(self, account_id: str) -> None:
        """IDLE brought news of a change outside INBOX's new mail (NOTIFY)."""
        ...


@dataclass
class Watch:
    account_id: str
    generation: int
    state: State = "opening"
    session: MailboxSession | None = None
    connected_at: float = 0.0
    idle_since: float = 0.0
    heard_at: float = 0.0
    stop_reason: WhyStopped | None = None
    fileno: int = -1
    parked: bool = False  # stop short of IDLE until ``activate``
    opening: bool = True  # its open is still timed (``LoginRate``)
    probe_sent_at: float | None = None  # a liveness probe awaits its answer
    draw: float = 0.0  # where in the probe spread this watch's next probe falls
    folders_stale: bool = False  # listed again: ask for its pushed folders before IDLE


class WatchCounters:
    """Logins timed from ``start`` to parked or IDLE (``policies.login_rate``: the rate a
    failover's logins are planned with), and liveness probes by outcome since the last
    take. Any thread."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._logins = LoginRate()
        self._probes = {"sent": 0, "answered": 0, "unanswered": 0}

    def login_started(self) -> None:
        with self._lock:
            self._logins.started(self._clock())

    def login_ended(self, watch: Watch, *, ok: bool) -> None:
        """The watch's open ended (parked, in IDLE, or failed); counted once a watch."""
        with self._lock:
            if not watch.opening:
                return
            watch.opening = False
            self._logins.finished(self._clock(), ok=ok)

    def login_rate(self) -> float | None:
        with self._lock:
            return self._logins.per_second(self._clock())

    def probe(self, outcome: str) -> None:
        with self._lock:
            self._probes[outcome] += 1

    def take_probes(self) -> dict[str, int]:
        with self._lock:
            counts, self._probes = self._probes, dict.fromkeys(self._probes, 0)
        return counts
