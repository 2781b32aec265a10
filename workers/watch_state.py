"""What the watch manager (``workers.watch``) keeps per watch, and what it calls back: a
watch's state and timers (``Watch``), and the hooks the watch path's ingestion answers
(``WatchHooks``, ``workers.watch_ingest``)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal, Protocol

from application.mail.ports import MailboxSession
from application.mail.sync_outcome import SyncOutcome
from workers.policies.watch_stops import WhyStopped

State = Literal["opening", "parked", "idling", "fetching", "refreshing", "stopped"]


class WatchHooks(Protocol):
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
