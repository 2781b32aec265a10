"""What every command shares: settings in, an opened app out, and errors as one line.

Settings are read once, when a command opens the app (``--help`` and ``--version``
need none). Environment failures — a bad setting, an unreachable or unreadable
database — become a ``CliError`` whose message ``main`` prints as one line; a
traceback is left for bugs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg_pool
from eventsourcing.persistence import InterfaceError, OperationalError
from pydantic import ValidationError

from application.app import App
from application.errors import StoreUnavailable
from infrastructure.bootstrap import bootstrap, projection_runner
from infrastructure.crypto.master_key import MasterKeyError
from infrastructure.runtime.settings import Settings
from infrastructure.sql.database import (
    DatabaseUrl,
    PostgresDatabase,
    SqliteDatabase,
    store_exists,
)

EXIT_FAILED = 1
EXIT_USAGE = 2

# Raised when the database cannot be reached, opened or read right now.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    StoreUnavailable,
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg_pool.PoolTimeout,
    sqlite3.OperationalError,
)


def unavailable(error: BaseException) -> bool:
    # ``file is not a database`` is a bare sqlite3.DatabaseError; its subclasses
    # (integrity, programming errors) are bugs and keep their traceback.
    return isinstance(error, UNAVAILABLE) or type(error) is sqlite3.DatabaseError


class CliError(Exception):
    """A failure to report as ``error: <message>`` with a non-zero exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def load_settings(**overrides: Any) -> Settings:
    try:
        return Settings(**overrides)
    except ValidationError as invalid:
        # Name the variable and the rule; never echo the value (it may hold a password).
        problems = "; ".join(
            f"TIDINGS_{str(e['loc'][0]).upper() if e['loc'] else '?'}: {e['msg']}"
            for e in invalid.errors()
        )
        raise CliError(f"invalid settings: {problems}") from None


def describe(url: DatabaseUrl) -> str:
    """Where the data lives, without credentials."""
    if url.dialect == "sqlite":
        return f"sqlite {url.sqlite_path}"
    return f"postgresql {url.host}:{url.port}/{url.dbname} schema {url.schema}"


@contextmanager
def opened_app(*, existing: bool = False, **overrides: Any) -> Iterator[App]:
    """The app built from ``TIDINGS_*`` (``overrides`` win), closed on the way out.

    ``existing``: a read-only command, which must not create an empty store (and a
    master key in the current directory) where none is; it says so instead."""
    settings = load_settings(**overrides)
    try:
        url = DatabaseUrl.parse(settings.database_url)
    except ValueError as bad:  # BadDatabaseUrl, or e.g. a port that is not a number
        raise CliError(f"invalid settings: TIDINGS_DATABASE_URL: {bad}") from None
    where = describe(url)
    try:
        if existing and not store_exists(url):
            raise CliError(f"no tidings store at {where}: check TIDINGS_DATABASE_URL")
        app = bootstrap(settings)
    except MasterKeyError as error:  # a wrong, malformed or missing master key
        raise CliError(first_line(error), EXIT_USAGE) from None
    except OSError as error:  # e.g. the SQLite directory cannot be created
        raise CliError(f"cannot open the database ({where}): {error.strerror or error}") from None
    except ValueError as error:  # a setting the adapters refuse
        raise CliError(f"invalid configuration: {first_line(error)}") from None
    except Exception as error:
        if unavailable(error):
            raise CliError(f"database unavailable ({where}): {first_line(error)}") from None
        raise
    try:
        yield app
    except Exception as error:
        if unavailable(error):
            raise CliError(f"database unavailable ({where}): {first_line(error)}") from None
        raise
    finally:
        app.close()


def location(app: App) -> str:
    """Where an opened app keeps its data, without credentials."""
    db = projection_runner(app).db
    if isinstance(db, SqliteDatabase):
        return f"sqlite {db.path}"
    if isinstance(db, PostgresDatabase):
        return describe(db.url)
    return db.dialect


def is_embedded(app: App) -> bool:
    """True on SQLite, where a command catches projections up itself."""
    return projection_runner(app).db.dialect == "sqlite"
