"""The watch manager's threads against fake sessions on socket pairs: every watch that
goes back to IDLE is registered at the mux (wake-ups are coalesced: none may be lost)."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from application.mail.ports import IdleNews
from application.mail.state import ErrorKind
from application.mail.sync_outcome import SyncOutcome
from workers import watch_logins
from workers.policies.watch_stops import StopReason
from workers.watch import WatchManager


class FakeSession:
    """IDLE on one end of a socket pair; the test writes "EXISTS" on the other."""

    def __init__(self) -> None:
        self.ours, self.server = socket.socketpair()
        self.ours.setblocking(False)
        self.probes = 0
        self.answering = True  # the "server" answers a probe at once

    def idle_start(self) -> IdleNews:
        return IdleNews()

    def idle_fileno(self) -> int:
        return self.ours.fileno()

    def idle_read(self) -> IdleNews:
        try:
            data = self.ours.recv(4096)
        except BlockingIOError:
            return IdleNews()
        return IdleNews(
            exists=b"EXISTS" in data,
            closed=not data,
            heard=True,
            answered=b"ANSWER" in data,
            folders_changed=b"STATUS" in data,
        )

    def idle_probe(self) -> None:
        self.probes += 1
        if self.answering:
            self.server.sendall(b"ANSWER")

    def close(self) -> None:
        self.ours.close()
        self.server.close()


class FakeHooks:
    def __init__(self) -> None:
        self.sessions: dict[str, FakeSession] = {}
        self.syncs: Counter[str] = Counter()
        self.stopped: list[tuple[str, str]] = []
        self.failing: ErrorKind | None = None  # every page ends with this kind
        self.asked: Counter[str] = Counter()  # which folders to push, asked per account
        self.changed: Counter[str] = Counter()  # news of changed folders per account
        self.prepared: list[list[str]] = []  # the batches of logins read ahead for
        self.opened_unprepared: list[str] = []
        self._lock = threading.Lock()

    def prepare(self, account_ids: list[str]) -> None:
        with self._lock:
            self.prepared.append(list(account_ids))

    def open_session(self, account_id: str) -> Any:
        with self._lock:
            if not any(account_id in batch for batch in self.prepared):
                self.opened_unprepared.append(account_id)
        session = FakeSession()
        with self._lock:
            self.sessions[account_id] = session
        return session

    def sync(self, account_id: str, session: Any) -> Future[SyncOutcome]:
        with self._lock:
            self.syncs[account_id] += 1
        # As the group committer does: the answer comes from another thread.
        answer: Future[SyncOutcome] = Future()
        outcome = SyncOutcome(account_id, error_kind=self.failing)
        threading.Thread(target=answer.set_result, args=(outcome,)).start()
        return answer

    def on_stopped(
        self, account_id: str, generation: int, reason: str, error: Any, lived: float
    ) -> None:
        with self._lock:
            self.stopped.append((account_id, reason))

    def on_mail(self, account_id: str, outcome: SyncOutcome) -> None:
        pass

    def watch_folders(self, account_id: str, session: Any) -> None:
        with self._lock:
            self.asked[account_id] += 1

    def on_folders_changed(self, account_id: str) -> None:
        with self._lock:
            self.changed[account_id] += 1


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


def test_a_page_that_could_not_be_stored_leaves_the_watch_running(
    manager: tuple[WatchManager, FakeHooks],
) -> None:
    watches, hooks = manager
    hooks.failing = ErrorKind.INGEST_FAILED
    watches.start("a")
    wait_for(lambda: watches.watching() == {"a": "idling"})
    for rounds in (2, 3):  # new mail, a page that cannot be stored: IDLE again each time
        hooks.sessions["a"].server.sendall(b"* 2 EXISTS\r\n")

        def synced(rounds: int = rounds) -> bool:
            return hooks.syncs["a"] == rounds

        wait_for(synced)
        wait_for(lambda: watches.watching() == {"a": "idling"})
    assert hooks.stopped == []
    hooks.failing = ErrorKind.TRANSIENT  # the server's trouble still stops it
    hooks.sessions["a"].server.sendall(b"* 3 EXISTS\r\n")
    wait_for(lambda: hooks.stopped == [("a", ErrorKind.TRANSIENT)])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_answered_probe_keeps_the_session_across_many_probe_periods() -> None:
    hooks, clock = FakeHooks(), FakeClock()
    watches = WatchManager(hooks, probe_after=3.0, probe_timeout=2.0, clock=clock)
    try:
        watches.start("a")
        wait_for(lambda: watches.watching() == {"a": "idling"})
        session = hooks.sessions["a"]
        answered = 0
        for period in range(1, 11):  # ten silent probe periods
            clock.now += 3.0

            def probed(period: int = period) -> bool:
                return session.probes == period

            wait_for(probed)

            # The mux takes the answer before the clock moves on: an answer read after the
            # next step would start the silence there, and the next probe would never be due.
            def taken(period: int = period) -> bool:
                nonlocal answered
                answered += watches.take_probe_counts()["answered"]
                return answered == period

            wait_for(taken)
        assert watches.watching() == {"a": "idling"}
        assert hooks.sessions["a"] is session  # one session throughout
        assert hooks.stopped == []
    finally:
        watches.close()


def test_an_unanswered_probe_stops_the_watch_after_probe_timeout() -> None:
    hooks, clock = FakeHooks(), FakeClock()
    watches = WatchManager(hooks, probe_after=3.0, probe_timeout=2.0, clock=clock)
    try:
        watches.start("a")
        wait_for(lambda: watches.watching() == {"a": "idling"})
        hooks.sessions["a"].answering = False
        clock.now += 3.0
        wait_for(lambda: hooks.sessions["a"].probes == 1)
        clock.now += 1.5  # within probe_timeout: still alive
        time.sleep(1.2)  # a timer check or more on the mux
        assert watches.watching() == {"a": "idling"}
        clock.now += 0.6
        wait_for(lambda: hooks.stopped == [("a", StopReason.SILENT)])
    finally:
        watches.close()


def test_keepalives_postpone_the_probe() -> None:
    hooks, clock = FakeHooks(), FakeClock()
    watches = WatchManager(hooks, probe_after=3.0, probe_timeout=2.0, clock=clock)
    try:
        watches.start("a")
        wait_for(lambda: watches.watching() == {"a": "idling"})
        session = hooks.sessions["a"]
        for _ in range(5):
            clock.now += 2.0
            session.server.sendall(b"* OK Still here\r\n")
            time.sleep(1.2)
        assert session.probes == 0
        assert hooks.stopped == []
    finally:
        watches.close()


class SlowLogins(FakeHooks):
    """Each login takes 20 ms of the server's time, one at a time (a saturated server):
    a flood of them completes at ~50 a second, whatever the pool size."""

    def __init__(self) -> None:
        super().__init__()
        self.server = threading.Lock()

    def open_session(self, account_id: str) -> Any:
        with self.server:
            time.sleep(0.02)
        return super().open_session(account_id)


def test_a_flood_of_logins_measures_the_rate_they_complete_at() -> None:
    hooks = SlowLogins()
    watches = WatchManager(hooks, pool_size=8)
    try:
        assert watches.login_rate() is None  # nothing measured yet
        accounts = [f"a{i}" for i in range(40)]
        for account_id in accounts[:20]:
            watches.start(account_id, parked=True)  # parked counts as logged in
        for account_id in accounts[20:]:
            watches.start(account_id)
        wait_for(lambda: len(watches.watching()) == 40)
        wait_for(lambda: set(watches.watching().values()) == {"parked", "idling"})
        rate = watches.login_rate()
        # ~50/s: the throughput (8 at a time would be ~400/s if each were timed alone);
        # less on a loaded machine.
        assert rate is not None and 10.0 < rate < 51.0
    finally:
        watches.close()


def test_pushed_folders_are_asked_for_once_a_start_and_again_when_refreshed(
    manager: tuple[WatchManager, FakeHooks],
) -> None:
    watches, hooks = manager
    watches.start("a")
    wait_for(lambda: watches.watching() == {"a": "idling"})
    assert hooks.asked["a"] == 1
    for rounds in (2, 3):  # new mail: no asking again
        hooks.sessions["a"].server.sendall(b"* 2 EXISTS\r\n")

        def synced(rounds: int = rounds) -> bool:
            return hooks.syncs["a"] == rounds

        wait_for(synced)
        wait_for(lambda: watches.watching() == {"a": "idling"})
    assert hooks.asked["a"] == 1
    assert watches.refresh_folders("a")  # listed again: asked again, IDLE again
    wait_for(lambda: hooks.asked["a"] == 2)
    wait_for(lambda: watches.watching() == {"a": "idling"})
    hooks.sessions["a"].server.sendall(b"* 2 EXISTS\r\n")  # still heard at the mux
    wait_for(lambda: hooks.syncs["a"] == 4)
    assert not watches.refresh_folders("nobody")
    assert hooks.stopped == []


def test_news_of_changed_folders_is_told_and_the_watch_stays_in_idle(
    manager: tuple[WatchManager, FakeHooks],
) -> None:
    watches, hooks = manager
    watches.start("a")
    wait_for(lambda: watches.watching() == {"a": "idling"})
    hooks.sessions["a"].server.sendall(b"* STATUS Archive (MESSAGES 1)\r\n")
    wait_for(lambda: hooks.changed["a"] == 1)
    assert watches.watching() == {"a": "idling"}
    assert hooks.syncs["a"] == 1  # no fetch: only the catch-up after login


class GatedLogins(FakeHooks):
    """Logins wait on a gate: the first batch's reads wait too, so the rest queue."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def prepare(self, account_ids: list[str]) -> None:
        super().prepare(account_ids)
        self.gate.wait(5)


def test_logins_started_together_have_their_reads_made_together_in_bounded_batches() -> None:
    hooks = GatedLogins()
    watches = WatchManager(hooks, pool_size=4)
    try:
        accounts = [f"a{i:03d}" for i in range(200)]
        watches.start(accounts[0])  # a lone login: a batch of one
        wait_for(lambda: hooks.prepared == [["a000"]])
        for account_id in accounts[1:]:  # a flood while the first batch waits
            watches.start(account_id, parked=True)
        hooks.gate.set()
        wait_for(lambda: len(watches.watching()) == 200)
        wait_for(lambda: set(watches.watching().values()) == {"parked", "idling"})
        batches = hooks.prepared
        assert sorted(a for batch in batches for a in batch) == accounts  # each once
        assert all(len(batch) <= watch_logins.OPEN_BATCH for batch in batches)
        assert len(batches) < 1 + 199 / 8, "a flood read one login at a time"
        assert hooks.opened_unprepared == []  # every login after its batch's reads
    finally:
        watches.close()


class FailingPrepare(FakeHooks):
    def prepare(self, account_ids: list[str]) -> None:
        raise RuntimeError("a bug")


def test_a_failing_read_ahead_leaves_each_login_to_read_its_own() -> None:
    watches = WatchManager(FailingPrepare(), pool_size=2)
    try:
        for account_id in ("a", "b", "c"):
            watches.start(account_id)
        wait_for(lambda: watches.watching() == dict.fromkeys("abc", "idling"))
    finally:
        watches.close()
