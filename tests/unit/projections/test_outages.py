"""Which failures of a projection step are outages (retried whole) and which are the
event's (quarantined): SQLite reports bad data as OperationalError too."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from application.errors import StoreUnavailable
from projections.runner import is_outage


@pytest.mark.parametrize(
    "error",
    [
        StoreUnavailable("gone"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.InterfaceError("the connection is closed"),
        sqlite3.OperationalError("database is locked"),
        sqlite3.OperationalError("disk I/O error"),
        sqlite3.OperationalError("database or disk is full"),
    ],
)
def test_outages(error: Exception) -> None:
    assert is_outage(error)


@pytest.mark.parametrize(
    "error",
    [
        sqlite3.OperationalError("malformed JSON"),
        sqlite3.IntegrityError("UNIQUE constraint failed"),
        OverflowError("Python int too large to convert to SQLite INTEGER"),
        psycopg.errors.NumericValueOutOfRange("bigint out of range"),
        psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence"),
        RuntimeError("a projection bug"),
        KeyError("field"),
    ],
)
def test_the_event_s_own_failures(error: Exception) -> None:
    assert not is_outage(error)
