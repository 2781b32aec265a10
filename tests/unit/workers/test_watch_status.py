"""The watch report's writer: only changes, coalesced, off the caller's thread; a failed
write is retried with the next report; closing clears what was reported."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from workers.policies.watch_report import WatchStatus
from workers.watch_status import WatchStatusWriter

Changes = Mapping[str, tuple[str, str] | None]
HOT = WatchStatus("watching", "hot")
BACKOFF = WatchStatus("backoff", "hot")


class Store:
    """The ``record_watches`` part of the mailbox state; ``gate`` holds writes back."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, dict[str, tuple[str, str] | None]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False
        self.written = threading.Event()

    def record_watches(self, worker_id: str, changes: Changes) -> None:
        self.gate.wait(5)
        if self.fail:
            self.fail = False
            self.written.set()
            raise ConnectionError("database down")
        self.writes.append((worker_id, dict(changes)))
        self.written.set()


def settle(store: Store) -> None:
    assert store.written.wait(5)
    store.written.clear()


def test_only_changes_are_written() -> None:
    store = Store()
    writer = WatchStatusWriter(store, "w1")  # type: ignore[arg-type]
    writer.report({"a": HOT, "b": HOT})
    settle(store)
    writer.report({"a": HOT, "b": BACKOFF})
    settle(store)
    writer.report({"a": HOT, "b": BACKOFF})  # nothing changed: no write
    writer.close()
    assert store.writes == [
        ("w1", {"a": ("watching", "hot"), "b": ("watching", "hot")}),
        ("w1", {"b": ("backoff", "hot")}),
        ("w1", {"a": None, "b": None}),  # closing clears what this worker reported
    ]


def test_changes_queued_behind_a_slow_write_coalesce() -> None:
    store = Store()
    store.gate.clear()
    writer = WatchStatusWriter(store, "w1")  # type: ignore[arg-type]
    writer.report({"a": HOT})  # in flight, held at the gate
    writer.report({"a": BACKOFF, "b": HOT})
    writer.report({"a": HOT, "b": HOT})
    store.gate.set()
    settle(store)
    if len(store.writes) < 2:
        settle(store)  # what queued up meanwhile, in one write right after
    assert store.writes == [
        ("w1", {"a": ("watching", "hot")}),
        ("w1", {"a": ("watching", "hot"), "b": ("watching", "hot")}),
    ]
    writer.close()


def test_a_failed_write_is_retried_with_the_next_report() -> None:
    store = Store()
    store.fail = True
    writer = WatchStatusWriter(store, "w1")  # type: ignore[arg-type]
    writer.report({"a": HOT})
    settle(store)  # failed
    assert store.writes == []
    for _ in range(50):  # the failed write may still be winding up: report again
        writer.report({"a": HOT, "b": BACKOFF})
        if store.written.wait(0.1):
            break
    assert store.writes == [("w1", {"a": ("watching", "hot"), "b": ("backoff", "hot")})]
    writer.close()
