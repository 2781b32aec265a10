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


class Batches:
    """A store's batch count (``CommitCount``), moved by the test; each caller thread
    names the batch its events were in."""

    def __init__(self) -> None:
        self.count = 0
        self.mine = threading.local()

    def committed(self) -> int:
        return self.count

    def committed_by_this_thread(self) -> int:
        batch: int = getattr(self.mine, "batch", 0)
        return batch


def run_as(shared: SharedCatchUp, batches: Batches, batch: int) -> threading.Thread:
    def caller() -> None:
        batches.mine.batch = batch
        shared.run()

    thread = threading.Thread(target=caller)
    thread.start()
    return thread


def test_callers_of_a_batch_committed_before_the_running_catch_up_began_share_it() -> None:
    catch_up, batches = SlowCatchUp(), Batches()
    batches.count = 1  # one batch of nine callers is committed
    shared = SharedCatchUp(catch_up, batches)
    leader = run_as(shared, batches, 1)
    assert catch_up.running.wait(5)
    followers = [run_as(shared, batches, 1) for _ in range(8)]  # answered after it began
    catch_up.release.set()
    for thread in [leader, *followers]:
        thread.join(10)
    assert not any(t.is_alive() for t in [leader, *followers])
    assert catch_up.runs == 1, "the batch's callers wait for no second catch-up"


def test_a_batch_committed_after_the_running_catch_up_began_gets_the_next_one() -> None:
    catch_up, batches = SlowCatchUp(), Batches()
    batches.count = 1
    shared = SharedCatchUp(catch_up, batches)
    first = run_as(shared, batches, 1)
    assert catch_up.running.wait(5)
    batches.count = 2  # committed while the catch-up runs: it may not have read it
    later = [run_as(shared, batches, 2) for _ in range(4)]
    threading.Event().wait(0.3)
    assert catch_up.runs == 1
    catch_up.release.set()
    for thread in [first, *later]:
        thread.join(10)
    assert not any(t.is_alive() for t in [first, *later])
    assert catch_up.runs == 2, "one more, for the later batch's four callers together"


def test_a_caller_that_appended_nothing_waits_for_no_catch_up() -> None:
    catch_up, batches = SlowCatchUp(), Batches()
    shared = SharedCatchUp(catch_up, batches)
    shared.run()
    assert catch_up.runs == 0
