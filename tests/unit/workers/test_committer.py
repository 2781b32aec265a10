"""GroupCommitter: items queued while a batch is written go in together, each answered
by its own future; a crashing commit fails its batch but not the thread; close commits
what is queued."""

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
    committer: GroupCommitter[int, str] = GroupCommitter(
        commit, lambda item, error: f"failed {item}"
    )
    answers = {0: committer.submit(0)}
    assert commit.started.wait(5)  # the first batch is being written: [0]
    for i in range(1, 6):
        answers[i] = committer.submit(i)
    assert not answers[5].done()
    commit.release.set()
    results = {i: answer.result(timeout=5) for i, answer in answers.items()}
    committer.close()
    assert commit.batches == [[0], [1, 2, 3, 4, 5]]
    assert results == {i: f"ok {i}" for i in range(6)}


def test_a_crashing_commit_fails_its_batch_and_the_next_batch_still_commits() -> None:
    commit = SlowCommit()
    commit.release.set()
    committer = GroupCommitter(commit, lambda item, error: f"failed {item} {error}")
    assert committer.submit(13).result(timeout=5) == "failed 13 bug"
    later = [committer.submit(1), committer.submit(2)]
    committer.close()  # commits what is queued before it stops
    assert [answer.result(timeout=0) for answer in later] == ["ok 1", "ok 2"]


def test_a_failing_callback_does_not_stop_the_committer() -> None:
    commit = SlowCommit()
    committer = GroupCommitter(commit, lambda item, error: "failed")
    first = committer.submit(1)
    first.add_done_callback(lambda answer: 1 / 0)  # runs on the committer thread
    commit.release.set()
    assert first.result(timeout=5) == "ok 1"
    assert committer.submit(2).result(timeout=5) == "ok 2"
    committer.close()


def test_batches_are_capped() -> None:
    commit = SlowCommit()
    committer = GroupCommitter(commit, lambda item, error: "failed", max_batch=2)
    committer.submit(0)
    assert commit.started.wait(5)
    for i in range(1, 6):
        committer.submit(i)
    commit.release.set()
    committer.close()
    assert commit.batches == [[0], [1, 2], [3, 4], [5]]
