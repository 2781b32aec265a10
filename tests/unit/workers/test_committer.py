"""GroupCommitter: items queued while a batch is written go in together; a crashing
commit fails its batch but not the thread; close commits what is queued."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from workers.committer import GroupCommitter


class SlowCommit:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = threading.Event()
        self.started = threading.Event()

    def __call__(self, items: Sequence[int]) -> list[str]:
        self.started.set()
        self.release.wait(5)
        self.batches.append(list(items))
        if 13 in items:
            raise RuntimeError("bug")
        return [f"ok {i}" for i in items]


def test_items_queued_during_a_write_are_committed_as_one_batch() -> None:
    commit = SlowCommit()
    results: dict[int, str] = {}
    done = threading.Semaphore(0)
    committer: GroupCommitter[int, str] = GroupCommitter(
        commit, lambda item, error: f"failed {item}"
    )

    def submit(i: int) -> None:
        def record(result: str) -> None:
            results[i] = result
            done.release()

        committer.submit(i, record)

    submit(0)
    assert commit.started.wait(5)  # the first batch is being written: [0]
    for i in range(1, 6):
        submit(i)
    commit.release.set()
    for _ in range(6):
        assert done.acquire(timeout=5)
    committer.close()
    assert commit.batches == [[0], [1, 2, 3, 4, 5]]
    assert results == {i: f"ok {i}" for i in range(6)}


def test_a_crashing_commit_fails_its_batch_and_the_next_batch_still_commits() -> None:
    commit = SlowCommit()
    commit.release.set()
    results: list[str] = []
    got = threading.Semaphore(0)

    def done(result: str) -> None:
        results.append(result)
        got.release()

    committer = GroupCommitter(commit, lambda item, error: f"failed {item} {error}")
    committer.submit(13, done)
    assert got.acquire(timeout=5)
    committer.submit(1, done)
    committer.submit(2, done)
    committer.close()  # commits what is queued before it stops
    assert results == ["failed 13 bug", "ok 1", "ok 2"]


def test_batches_are_capped() -> None:
    commit = SlowCommit()
    committer = GroupCommitter(commit, lambda item, error: "failed", max_batch=2)
    committer.submit(0, lambda r: None)
    assert commit.started.wait(5)
    for i in range(1, 6):
        committer.submit(i, lambda r: None)
    commit.release.set()
    committer.close()
    assert commit.batches == [[0], [1, 2], [3, 4], [5]]
