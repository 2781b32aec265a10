"""The workers' retention thread: a run each interval until stopped; a failed run is
logged and the next turn runs again."""

from __future__ import annotations

import logging
import threading

import pytest

from workers.retention import run_retention


class Sweeper:
    def __init__(self, stop: threading.Event, turns: int, fail_first: bool) -> None:
        self.stop, self.turns, self.fail_first = stop, turns, fail_first
        self.runs = 0

    def run(self) -> None:
        self.runs += 1
        if self.runs >= self.turns:
            self.stop.set()
        if self.fail_first and self.runs == 1:
            raise ConnectionError("database away")


def test_runs_each_interval_until_stopped_and_survives_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = threading.Event()
    sweeper = Sweeper(stop, turns=3, fail_first=True)
    with caplog.at_level(logging.WARNING, logger="tidings.retention"):
        run_retention(sweeper, stop, 0.001)
    assert sweeper.runs == 3
    assert "retention.failed error=ConnectionError" in caplog.text


def test_a_stopped_worker_runs_no_sweep() -> None:
    stop = threading.Event()
    stop.set()
    sweeper = Sweeper(stop, turns=1, fail_first=False)
    run_retention(sweeper, stop, 0.001)
    assert sweeper.runs == 0
