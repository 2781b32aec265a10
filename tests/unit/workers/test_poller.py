"""The poller's background polls: each reports its outcome once; polls still queued when
the worker closes are dropped quietly (they were logged as errors, one per account, at
every shutdown of a busy worker)."""

from __future__ import annotations

import logging
import threading

import pytest

from application.mail.sync_outcome import SyncOutcome
from workers.poll import Poller


def test_polls_queued_at_close_are_dropped_without_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()

    def sync(account_id: str, deadline: float) -> SyncOutcome:
        release.wait(5)
        return SyncOutcome(account_id)

    done: list[SyncOutcome] = []
    poller = Poller(sync, concurrency=1)
    caplog.set_level(logging.ERROR)
    assert poller.submit("running", done.append)
    for i in range(5):
        assert poller.submit(f"queued-{i}", done.append)
    assert not poller.submit("running", done.append)  # still in flight: not twice
    poller.close()  # the five queued ones are cancelled
    release.set()
    poller._pool.shutdown(wait=True)
    assert [o.account_id for o in done] == ["running"]
    assert caplog.records == []
