"""Teardown work the next test need not wait for: stopping a finished test's Dovecot
(~2.5 s) or dropping its PostgreSQL schema. ``later(fn, *args)`` runs it on a background
thread; ``finish()`` (at the end of the session, ``tests/conftest.py``) waits for all of it,
so nothing is left running, and returns what failed, which fails the run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

# Threads start with the first task; a few, so one slow stop does not hold up the drops.
_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="teardown")
_failed: list[str] = []
_lock = threading.Lock()


def later(fn: Callable[..., Any], *args: Any) -> None:
    what = f"{getattr(fn, '__qualname__', fn)}{args!r}"

    def report(future: Future[Any]) -> None:
        error = future.exception()
        if error is not None:
            with _lock:
                _failed.append(f"{what}: {error!r}")

    _pool.submit(fn, *args).add_done_callback(report)


def finish() -> list[str]:
    """Wait for every background teardown; the ones that failed."""
    _pool.shutdown(wait=True)
    with _lock:
        return list(_failed)
