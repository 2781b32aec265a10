"""sqlite3's errors as eventsourcing's, for statements run on the library's SQLite
connections outside its own transactions (which translate them the same way)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from eventsourcing.persistence import (
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    OperationalError,
)

_SQLITE_ERRORS: tuple[tuple[type[sqlite3.Error], type[Exception]], ...] = (
    (sqlite3.IntegrityError, IntegrityError),
    (sqlite3.OperationalError, OperationalError),
    (sqlite3.InterfaceError, InterfaceError),
    (sqlite3.DataError, DataError),
    (sqlite3.InternalError, InternalError),
)


@contextmanager
def translated() -> Iterator[None]:
    """sqlite3's errors as the library's (what its own transactions raise)."""
    try:
        yield
    except sqlite3.Error as error:
        for raw, ours in _SQLITE_ERRORS:
            if isinstance(error, raw):
                raise ours(str(error)) from error
        raise
