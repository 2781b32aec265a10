"""The group commit's leader/follower protocol with a write function of the test's own:
every caller answered exactly once with its own outcome, batches formed while a batch is
written, one batch at a time, and a failing write that fails only its batch."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence

import pytest

from infrastructure.eventstore.group_commit import Entry, GroupCommit


class Refused(Exception):
    pass


class Recorder:
    """Writes by remembering; refuses items named ``bad``; ``gate`` holds a write."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.writing = threading.Event()
        self.active = 0
        self.most_active = 0
        self._lock = threading.Lock()

    def write(self, batch: Sequence[Entry[str]]) -> None:
        with self._lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        self.writing.set()
        self.gate.wait(10)
        with self._lock:
            self.active -= 1
        self.batches.append([entry.item for entry in batch])
        for entry in batch:
            if entry.item.startswith("bad"):
                entry.error = Refused(entry.item)


def submit_all(group: GroupCommit[str], items: list[str]) -> dict[str, BaseException | None]:
    outcomes: dict[str, BaseException | None] = {}

    def run(item: str) -> None:
        try:
            group.submit(item)
        except Exception as error:
            outcomes[item] = error
        else:
            outcomes[item] = None

    threads = [threading.Thread(target=run, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads), "a caller hangs"
    return outcomes


def test_a_lone_caller_writes_a_batch_of_one_in_its_own_thread() -> None:
    recorder = Recorder()
    threads: list[str] = []

    def write(batch: Sequence[Entry[str]]) -> None:
        threads.append(threading.current_thread().name)
        recorder.write(batch)

    group = GroupCommit(write)
    group.submit("a")
    group.submit("b")
    assert recorder.batches == [["a"], ["b"]]
    assert threads == [threading.current_thread().name] * 2


def test_callers_queued_behind_a_write_share_the_next_batch_each_with_its_own_outcome() -> None:
    recorder = Recorder()
    group = GroupCommit(recorder.write)
    recorder.gate.clear()
    first = threading.Thread(target=group.submit, args=("first",))
    first.start()
    assert recorder.writing.wait(5)
    # the first batch is being written: these queue up behind it
    items = ["ok1", "bad1", "ok2", "bad2", "ok3"]
    result: dict[str, BaseException | None] = {}
    waiter = threading.Thread(target=lambda: result.update(submit_all(group, items)))
    waiter.start()
    deadline = threading.Event()
    deadline.wait(0.5)  # let them queue (they only append to the queue)
    recorder.gate.set()
    first.join(10)
    waiter.join(20)
    assert set(result) == set(items)
    assert {k for k, v in result.items() if v is not None} == {"bad1", "bad2"}
    assert all(isinstance(result[k], Refused) and str(result[k]) == k for k in ("bad1", "bad2"))
    assert recorder.batches[0] == ["first"]
    assert sorted(x for b in recorder.batches[1:] for x in b) == sorted(items)
    assert len(recorder.batches) < 1 + len(items), "the queued callers shared a batch"
    assert recorder.most_active == 1, "one batch at a time"


def test_many_callers_each_answered_once_one_batch_at_a_time() -> None:
    recorder = Recorder()
    group = GroupCommit(recorder.write, max_size=7)
    items = [f"ok{i}" if i % 5 else f"bad{i}" for i in range(200)]
    outcomes = submit_all(group, items)
    written = [x for b in recorder.batches for x in b]
    assert sorted(written) == sorted(items), "each exactly once"
    assert all(len(b) <= 7 for b in recorder.batches)
    assert recorder.most_active == 1
    assert {k for k, v in outcomes.items() if v is not None} == {i for i in items if "bad" in i}


def test_a_write_that_raises_fails_its_batch_and_the_next_callers_still_get_written() -> None:
    calls: list[list[str]] = []

    def write(batch: Sequence[Entry[str]]) -> None:
        calls.append([e.item for e in batch])
        if len(calls) == 1:
            raise RuntimeError("bug in write")

    group = GroupCommit(write)
    with pytest.raises(RuntimeError, match="bug in write"):
        group.submit("x")
    group.submit("y")  # the lead was handed on: no caller is stuck behind the failure
    assert calls == [["x"], ["y"]]


def test_an_entry_bigger_than_the_batch_size_is_written_alone() -> None:
    recorder = Recorder()
    group = GroupCommit(recorder.write, max_size=10)
    group.submit("big", size=50)
    assert recorder.batches == [["big"]]


class Outage(Exception):
    pass


def test_an_outage_fails_the_callers_queued_behind_it_at_once() -> None:
    gate = threading.Event()
    writing = threading.Event()
    calls: list[list[str]] = []

    def write(batch: Sequence[Entry[str]]) -> None:
        calls.append([e.item for e in batch])
        writing.set()
        gate.wait(10)
        for entry in batch:
            entry.error = Outage("the database is gone")

    group = GroupCommit(write, outages=(Outage,))
    first = threading.Thread(target=lambda: submit_all(group, ["first"]))
    first.start()
    assert writing.wait(5)
    result: dict[str, BaseException | None] = {}
    queued = threading.Thread(target=lambda: result.update(submit_all(group, ["a", "b", "c"])))
    queued.start()
    threading.Event().wait(0.5)  # let them queue
    gate.set()
    queued.join(20)
    first.join(10)
    assert calls == [["first"]], "the queued callers were not written in another round"
    assert set(result) == {"a", "b", "c"}
    errors = list(result.values())
    assert all(isinstance(e, Outage) for e in errors)
    assert len({id(e) for e in errors}) == 3, "each caller raises its own instance"
    with pytest.raises(Outage):
        group.submit("later")  # the next caller leads a batch of its own again
    assert calls[-1] == ["later"]


def test_a_caller_interrupted_while_queued_leaves_and_the_others_go_on() -> None:
    recorder = Recorder()
    recorder.gate.clear()  # the first batch is held while this thread queues behind it
    commit: GroupCommit[str] = GroupCommit(recorder.write)
    leader = threading.Thread(target=commit.submit, args=("lead",))
    leader.start()
    assert recorder.writing.wait(5)
    main = threading.get_ident()
    # Python's own Ctrl-C handler, even where the runner was started with SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            # Ctrl-C reaches this (the main) thread while it waits for its turn; started
            # in the block, so a signal however late or early is raised inside it.
            threading.Timer(0.2, signal.pthread_kill, args=(main, signal.SIGINT)).start()
            commit.submit("interrupted")
    finally:
        signal.signal(signal.SIGINT, previous)
    later = threading.Thread(target=commit.submit, args=("later",))
    later.start()
    recorder.gate.set()
    leader.join(5)
    later.join(5)
    assert not leader.is_alive() and not later.is_alive()  # nobody waits for the one gone
    written = [item for batch in recorder.batches for item in batch]
    assert written == ["lead", "later"]
