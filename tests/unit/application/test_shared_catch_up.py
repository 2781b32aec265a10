"""Inline catch-ups shared by concurrent writers: a caller returns only after a catch-up
that started after its call has finished; callers that arrive while one runs share the
next one; a failing catch-up raises in the thread that ran it only."""

from __future__ import annotations

import threading

import pytest

from application.app import SharedCatchUp


class SlowCatchUp:
    def __init__(self) -> None:
        self.runs = 0
        self.running = threading.Event()
        self.release = threading.Event()
        self.fail_next = False

    def __call__(self) -> int:
        self.runs += 1
        self.running.set()
        self.release.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("read model unavailable")
        return 0


def run_in_threads(shared: SharedCatchUp, n: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=shared.run) for _ in range(n)]
    for thread in threads:
        thread.start()
    return threads


def test_a_lone_caller_runs_its_own_catch_up() -> None:
    catch_up = SlowCatchUp()
    catch_up.release.set()
    shared = SharedCatchUp(catch_up)
    shared.run()
    shared.run()
    assert catch_up.runs == 2


def test_callers_arriving_during_a_catch_up_share_the_next_one() -> None:
    catch_up = SlowCatchUp()
    shared = SharedCatchUp(catch_up)
    first = run_in_threads(shared, 1)
    assert catch_up.running.wait(5)
    waiting = run_in_threads(shared, 8)  # their commits came after the running one began
    threading.Event().wait(0.3)
    assert catch_up.runs == 1, "nobody runs a second catch-up alongside the first"
    catch_up.release.set()
    for thread in first + waiting:
        thread.join(10)
    assert not any(t.is_alive() for t in first + waiting)
    assert catch_up.runs == 2, "one more catch-up, started after theirs, for all eight"


def test_a_failed_catch_up_raises_in_its_own_thread_and_the_waiters_go_on() -> None:
    catch_up = SlowCatchUp()
    catch_up.fail_next = True
    catch_up.release.set()
    shared = SharedCatchUp(catch_up)
    with pytest.raises(RuntimeError):
        shared.run()
    shared.run()  # the next caller runs its own
    assert catch_up.runs == 2
