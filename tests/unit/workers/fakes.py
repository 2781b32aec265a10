"""Fakes of the supervisor's collaborators, recording what they are asked."""

from __future__ import annotations

from collections.abc import Callable

from application.mail.sync_outcome import SyncOutcome
from application.signals import Signal
from workers.news import Inbox, WatchStopped
from workers.policies.watch_report import WatchStatus
from workers.policies.watch_stops import StopReason, WhyStopped
from workers.watch import State


class Watches:
    """The ``WatchManager`` as its owner sees it: which watches exist."""

    def __init__(self) -> None:
        self.watching_now: set[str] = set()
        self.started: list[str] = []
        self.parked: list[str] = []
        self.stopped: list[tuple[str, WhyStopped]] = []
        self.activated: list[str] = []
        self.refreshed: list[str] = []
        self.rate: float | None = None  # logins a second, as measured
        self.inbox: Inbox | None = None  # where a stopped watch reports its end, as the real one

    def start(self, account_id: str, *, parked: bool = False) -> int:
        (self.parked if parked else self.started).append(account_id)
        self.watching_now.add(account_id)
        return 1

    def activate(self, account_id: str) -> bool:
        self.activated.append(account_id)
        return account_id in self.watching_now

    def stop(self, account_id: str, reason: WhyStopped = StopReason.STOPPED) -> bool:
        self.stopped.append((account_id, reason))
        if account_id not in self.watching_now:
            return False
        if self.inbox is not None:
            self.watching_now.discard(account_id)
            self.inbox.tell(WatchStopped(account_id, reason))
        return True

    def is_watching(self, account_id: str) -> bool:
        return account_id in self.watching_now

    def refresh_folders(self, account_id: str) -> bool:
        self.refreshed.append(account_id)
        return account_id in self.watching_now

    def watching(self) -> dict[str, State]:
        return dict.fromkeys(self.watching_now, "idling")

    def take_probe_counts(self) -> dict[str, int]:
        return {}

    def login_rate(self) -> float | None:
        return self.rate

    def close(self) -> None:
        self.watching_now.clear()


class Registry:
    def __init__(self, worker_id: str, others: dict[str, int] | None = None) -> None:
        self.worker_id = worker_id
        self.others = others or {}  # other workers whose heartbeats are live
        self.interval = 1.0
        self.held = 0
        self.heartbeats = 0  # one per fleet tick

    def heartbeat(self, held: int, login_rate: float | None = None) -> None:
        self.held = held
        self.login_rate = login_rate
        self.heartbeats += 1

    def live_workers(self) -> dict[str, int]:
        return {**self.others, self.worker_id: self.held}

    def leave(self) -> None:
        pass


class Reader:
    def __init__(self) -> None:
        self.refreshes = 0
        self.lookups: list[str] = []

    def refresh(self) -> None:
        self.refreshes += 1

    def refreshed(self) -> None:
        pass

    def lookup(self, account_id: str) -> None:
        self.lookups.append(account_id)

    def close(self) -> None:
        pass


class Ingest:
    def changed(self, account_id: str) -> None:
        pass

    def close(self) -> None:
        pass


class Polls:
    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.slots = 1_000_000

    def free_slots(self) -> int:
        return self.slots - len(self.submitted)

    def submit(self, account_id: str, on_done: Callable[[SyncOutcome], None]) -> bool:
        self.submitted.append(account_id)
        return True

    def close(self) -> None:
        pass


class Report:
    def __init__(self) -> None:
        self.reports: list[dict[str, WatchStatus]] = []

    def report(self, report: dict[str, WatchStatus]) -> None:
        self.reports.append(report)

    def close(self) -> None:
        pass


def user_active(tenant_id: str, user_id: str) -> Signal:
    return Signal(kind="user_active", tenant_id=tenant_id, user_id=user_id)
