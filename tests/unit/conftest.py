"""Starts mypy in the background with the first unit test when ``test_mypy_strict`` is
among the tests to run (see ``tests/unit/gates.py``)."""

from __future__ import annotations

import pytest

from tests.unit import gates

MYPY_WANTED = pytest.StashKey[bool]()


def pytest_collection_finish(session: pytest.Session) -> None:
    # Under pytest-xdist every worker collects every test but runs only some: there
    # ``test_mypy_strict`` starts mypy itself, in the one worker that runs it.
    xdist_worker = hasattr(session.config, "workerinput")
    wanted = not xdist_worker and any(item.nodeid == gates.MYPY_TEST for item in session.items)
    session.config.stash[MYPY_WANTED] = wanted


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.stash.get(MYPY_WANTED, False):
        gates.MYPY.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    gates.MYPY.stop()
