"""The worker's collector policy: when it freezes and thaws, and what that does to cycles."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from infrastructure.runtime.gc_policy import YOUNG_THRESHOLD, HeapKeeper, kept_heap


class FakeCollector:
    def __init__(self, collects: int = 0) -> None:
        self.threshold = (700, 10, 10)
        self.calls: list[str] = []
        self._collects = collects

    def set_threshold(self, threshold0: int, threshold1: int = 10, threshold2: int = 10) -> None:
        self.threshold = (threshold0, threshold1, threshold2)

    def get_threshold(self) -> tuple[int, int, int]:
        return self.threshold

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")

    def collect(self) -> int:
        self.calls.append("collect")
        return self._collects


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def keeper(collector: FakeCollector, clock: Clock) -> HeapKeeper:
    return HeapKeeper(freeze_every=60, thaw_every=3600, collector=collector, clock=clock)


def test_start_raises_only_the_young_threshold() -> None:
    collector = FakeCollector()
    collector.threshold = (700, 11, 12)
    keeper(collector, Clock()).start()
    assert collector.threshold == (YOUNG_THRESHOLD, 11, 12)
    assert collector.calls == []


def test_freezes_every_minute_and_thaws_collects_freezes_every_hour() -> None:
    collector, clock = FakeCollector(), Clock()
    heap = keeper(collector, clock)
    heap.start()
    assert heap.step() == 60
    assert collector.calls == []
    clock.now += 59.9
    heap.step()
    assert collector.calls == []
    clock.now += 0.1
    assert heap.step() == 60
    assert collector.calls == ["freeze"]
    for _ in range(58):  # up to the hour: one freeze a minute
        clock.now += 60
        heap.step()
    assert collector.calls == ["freeze"] * 59
    collector.calls.clear()
    clock.now += 60
    assert heap.step() == 60  # the hour is due together with a freeze: one thaw does both
    assert collector.calls == ["unfreeze", "collect", "freeze"]
    collector.calls.clear()
    clock.now += 30
    assert heap.step() == 30  # the next freeze counts from the thaw
    assert collector.calls == []


def test_a_late_step_catches_up_once() -> None:
    collector, clock = FakeCollector(), Clock()
    heap = keeper(collector, clock)
    heap.start()
    clock.now += 10 * 60 + 5  # a stalled worker: ten minutes late
    assert heap.step() == 60
    assert collector.calls == ["freeze"]


def test_collected_cycles_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    collector, clock = FakeCollector(collects=42), Clock()
    heap = keeper(collector, clock)
    heap.start()
    clock.now += 3600
    with caplog.at_level("INFO", logger="tidings.heap"):
        heap.step()
    assert "heap.cycles_collected objects=42" in caplog.text


def test_run_stops_when_told() -> None:
    collector, stop = FakeCollector(), threading.Event()
    heap = HeapKeeper(freeze_every=0.01, thaw_every=3600, collector=collector)
    thread = threading.Thread(target=heap.run, args=(stop,))
    thread.start()
    try:
        for _ in range(500):
            if collector.calls.count("freeze") >= 3:
                break
            threading.Event().wait(0.01)
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert collector.calls.count("freeze") >= 3
    assert collector.threshold[0] == YOUNG_THRESHOLD


# --- the real collector -------------------------------------------------------------------


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def real_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    gc.collect()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    gc.collect()


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.mark.usefixtures("real_gc")
def test_a_frozen_cycle_is_left_alone_until_the_thaw() -> None:
    clock = Clock()
    heap = HeapKeeper(freeze_every=60, thaw_every=3600, clock=clock)
    heap.start()
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    garbage = cycle()  # alive (its two nodes refer to each other), unreachable
    clock.now += 60
    heap.step()
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert garbage() is not None, "a full collection looked at frozen objects"
    clock.now += 3600
    heap.step()
    assert garbage() is None, "the thaw did not collect the frozen cycle"
    assert gc.get_freeze_count() > 0  # and froze the survivors again


def test_a_batch_command_keeps_the_heap_as_a_worker_does_then_restores_the_collector() -> None:
    before = gc.get_threshold()
    with kept_heap():
        deadline = time.monotonic() + 5
        while gc.get_threshold()[0] != YOUNG_THRESHOLD and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
