"""The watch manager's threads against fake sessions on socket pairs: every watch that
goes back to IDLE is registered at the mux (wake-ups are coalesced: none may be lost)."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from application.mail.ports import IdleNews
from workers.policies.watch_stops import StopReason
from workers.sync import SyncOutcome
from workers.watch import WatchManager


class FakeSession:
    """IDLE on one end of a socket pair; the test writes "EXISTS" on the other."""

    def __init__(self) -> None:
        self.ours, self.server = socket.socketpair()
        self.ours.setblocking(False)

    def idle_start(self) -> IdleNews:
        return IdleNews()

    def idle_fileno(self) -> int:
        return self.ours.fileno()

    def idle_read(self) -> IdleNews:
        try:
            data = self.ours.recv(4096)
        except BlockingIOError:
            return IdleNews()
        return IdleNews(exists=b"EXISTS" in data, closed=not data, heard=True)

    def close(self) -> None:
        self.ours.close()
        self.server.close()


class FakeHooks:
    def __init__(self) -> None:
        self.sessions: dict[str, FakeSession] = {}
        self.syncs: Counter[str] = Counter()
        self.stopped: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def open_session(self, account_id: str) -> Any:
        session = FakeSession()
        with self._lock:
            self.sessions[account_id] = session
        return session

    def sync(self, account_id: str, session: Any, done: Callable[[SyncOutcome], None]) -> None:
        with self._lock:
            self.syncs[account_id] += 1
        # As the group committer does: the outcome comes back from another thread.
        threading.Thread(target=done, args=(SyncOutcome(account_id),)).start()

    def on_stopped(
        self, account_id: str, generation: int, reason: str, error: Any, lived: float
    ) -> None:
        with self._lock:
            self.stopped.append((account_id, reason))

    def on_mail(self, account_id: str, outcome: SyncOutcome) -> None:
        pass


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


@pytest.fixture
def manager() -> Iterator[tuple[WatchManager, FakeHooks]]:
    hooks = FakeHooks()
    watches = WatchManager(hooks, pool_size=8)
    yield watches, hooks
    watches.close()


def test_every_watch_back_in_idle_hears_its_news(manager: tuple[WatchManager, FakeHooks]) -> None:
    watches, hooks = manager
    accounts = [f"a{i}" for i in range(300)]
    starters = [
        threading.Thread(target=lambda part=part: [watches.start(a) for a in part])
        for part in (accounts[i::4] for i in range(4))
    ]
    for thread in starters:
        thread.start()
    for thread in starters:
        thread.join()
    wait_for(lambda: set(watches.watching().values()) == {"idling"})
    assert sorted(watches.watching()) == sorted(accounts)
    for rounds in (2, 3):  # twice: each time all of them go back to IDLE at once
        for account_id in accounts:
            hooks.sessions[account_id].server.sendall(b"* 2 EXISTS\r\n")
        wait_for(lambda: all(hooks.syncs[a] == rounds for a in accounts))
        wait_for(lambda: set(watches.watching().values()) == {"idling"})
    assert hooks.stopped == []


def test_stopped_watches_close_and_report(manager: tuple[WatchManager, FakeHooks]) -> None:
    watches, hooks = manager
    for i in range(50):
        watches.start(f"a{i}")
    wait_for(
        lambda: len(watches.watching()) == 50 and set(watches.watching().values()) == {"idling"}
    )
    for i in range(50):
        assert watches.stop(f"a{i}", StopReason.DEACTIVATED)
    wait_for(lambda: len(hooks.stopped) == 50)
    assert {reason for _, reason in hooks.stopped} == {StopReason.DEACTIVATED}
    assert watches.watching() == {}
