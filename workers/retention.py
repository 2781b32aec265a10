"""The retention sweeper's thread in a worker: a run every ``interval`` seconds until
``stop``. Every worker runs one; the sweeper's lease lets one of them sweep at a time
(the others find it held and wait for their next turn). A failed run (the database or
the lease backend unavailable) is logged and tried again at the next turn."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

log = logging.getLogger("tidings.retention")


class Sweeper(Protocol):
    """What the thread runs (``application.retention.sweeper.RetentionSweeper``)."""

    def run(self) -> object: ...


def run_retention(sweeper: Sweeper, stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        try:
            sweeper.run()
        except Exception as error:  # a database or lease hiccup: the next turn retries
            log.warning("retention.failed error=%s", type(error).__name__)
