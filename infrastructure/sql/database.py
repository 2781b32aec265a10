"""The read-model database: SQLite or PostgreSQL behind one small interface.

Statements use ``?`` placeholders everywhere; the PostgreSQL cursor rewrites them to
``%s`` (our SQL never contains a literal ``?`` or ``%``). Write transactions exclude
other writers from the start (SQLite ``BEGIN IMMEDIATE``) so a projection step reads
its tracking position and writes it back without a lost update.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import psycopg
import psycopg_pool

from application.errors import StoreUnavailable
from infrastructure.private_files import create_private_file, make_private_dir
from infrastructure.sql.copy_text import copy_text

SETUP_LOCK_ID = 7_411_863_215  # any constant: the advisory lock taken during set-up


class BadDatabaseUrl(ValueError):
    pass


@dataclass(frozen=True)
class DatabaseUrl:
    dialect: Literal["sqlite", "postgresql"]
    sqlite_path: Path | None = None
    host: str = "127.0.0.1"
    port: int = 5432
    user: str = "postgres"
    password: str = ""
    dbname: str = "postgres"
    schema: str = "public"

    @staticmethod
    def parse(url: str) -> DatabaseUrl:
        parts = urlsplit(url)
        if parts.scheme == "sqlite":
            # sqlite:///relative/path or sqlite:////absolute/path
            path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
            if not path or ":memory:" in path:
                raise BadDatabaseUrl("sqlite needs a file path, e.g. sqlite:///./tidings.db")
            return DatabaseUrl("sqlite", sqlite_path=Path(path))
        if parts.scheme in ("postgresql", "postgres"):
            query = parse_qs(parts.query)
            return DatabaseUrl(
                "postgresql",
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 5432,
                user=unquote(parts.username or "postgres"),
                password=unquote(parts.password or ""),
                dbname=parts.path.lstrip("/") or "postgres",
                schema=query.get("schema", ["public"])[0],
            )
        raise BadDatabaseUrl(f"unsupported database url scheme {parts.scheme!r}")

    @property
    def conninfo(self) -> str:
        return psycopg.conninfo.make_conninfo(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password or None,
            dbname=self.dbname,
            options=f"-c search_path={self.schema}",
            connect_timeout=10,
        )


def create_sqlite_file(path: Path) -> None:
    """Create the database file (and its missing directories) private before SQLite or
    the event recorder open it: SQLite gives its WAL and shared-memory files the
    database file's mode."""
    make_private_dir(path.parent)
    create_private_file(path)


def store_exists(url: DatabaseUrl, events_table: str = "stored_events") -> bool:
    """Whether a tidings store lives at ``url`` (its event table exists), without
    creating anything. Raises ``StoreUnavailable`` when the server cannot be reached."""
    if url.dialect == "sqlite":
        assert url.sqlite_path is not None
        if not url.sqlite_path.is_file():
            return False
        try:
            lite = sqlite3.connect(f"file:{url.sqlite_path}?mode=ro", uri=True, timeout=30)
        except sqlite3.OperationalError as error:
            raise StoreUnavailable(str(error)) from error
        try:
            row = lite.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (events_table,)
            ).fetchone()
        except sqlite3.DatabaseError as error:  # not a database at all
            raise StoreUnavailable(str(error)) from error
        finally:
            lite.close()
        return row is not None
    try:
        with psycopg.connect(url.conninfo, autocommit=True, connect_timeout=10) as conn:
            found = conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s"
                " AND table_name = %s",
                (url.schema, events_table),
            ).fetchone()
    except psycopg.OperationalError as error:
        raise StoreUnavailable(str(error)) from error
    return found is not None


class SqliteDatabase:
    dialect: Literal["sqlite"] = "sqlite"

    def __init__(self, path: Path, busy_timeout: float = 30.0) -> None:
        self.path = path
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            raise StoreUnavailable(str(error)) from error
        cursor = conn.cursor()
        try:
            yield cursor
        except BaseException:
            conn.rollback()
            raise
        else:
            conn.commit()
        finally:
            cursor.close()

    @contextmanager
    def reading(self) -> Iterator[Any]:
        conn = self._connection()
        cursor = conn.cursor()
        try:
            yield cursor
        finally:
            cursor.close()

    @contextmanager
    def setup_lock(self) -> Iterator[None]:
        # CREATE TABLE runs under BEGIN IMMEDIATE: SQLite serialises set-ups itself.
        yield

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


class _PgCursor:
    """Wraps a psycopg cursor: ``?`` placeholders, DB-API surface.

    A list parameter (an array for a set-based statement) travels in binary: psycopg's
    text format escapes every element through a regular expression, which cost more
    than everything else of a 5,000-event projection batch."""

    _translated: dict[tuple[str, tuple[bool, ...]], str] = {}

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor

    @classmethod
    def _sql(cls, sql: str, params: Sequence[Any] = ()) -> str:
        arrays = tuple(isinstance(param, list) for param in params)
        translated = cls._translated.get((sql, arrays))
        if translated is None:
            if any(arrays):
                parts = sql.split("?")
                marks = ["%b" if array else "%s" for array in arrays]
                if len(marks) != len(parts) - 1:  # let psycopg name the mismatch
                    marks = ["%s"] * (len(parts) - 1)
                translated = parts[0] + "".join(
                    mark + part for mark, part in zip(marks, parts[1:], strict=True)
                )
            else:
                translated = sql.replace("?", "%s")
            cls._translated[(sql, arrays)] = translated
        return translated

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._cursor.execute(self._sql(sql, params), params, prepare=True)

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any:
        return self._cursor.executemany(self._sql(sql), params)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Insert ``rows`` (str, int or None values) with one ``COPY`` (names are ours)."""
        if not rows:
            return
        with self._cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            copy.write(copy_text(rows, len(columns)))


class _CheckWhenIdle:
    """Checks a pooled connection before use only when it sat unused for a while.

    A check is a round trip: before every query it doubled the cost of a burst of
    small ones (a worker saving thousands of cursors). A connection that was in use a
    moment ago is alive; one that idled through a database restart is still caught
    before a caller gets it."""

    def __init__(self, after: float = 2.0) -> None:
        self._after = after
        self._returned: dict[int, float] = {}  # id(connection) -> when it came back

    def returned(self, conn: psycopg.Connection[Any]) -> None:
        self._returned[id(conn)] = time.monotonic()

    def check(self, conn: psycopg.Connection[Any]) -> None:
        if time.monotonic() - self._returned.pop(id(conn), float("-inf")) > self._after:
            psycopg_pool.ConnectionPool.check_connection(conn)


class PostgresDatabase:
    dialect: Literal["postgresql"] = "postgresql"

    def __init__(self, url: DatabaseUrl, max_size: int = 16) -> None:
        self.url = url
        idle = _CheckWhenIdle()
        self.pool = psycopg_pool.ConnectionPool(
            url.conninfo,
            min_size=1,
            max_size=max_size,
            open=False,
            timeout=10.0,
            check=idle.check,
            reset=idle.returned,
            # Reads need no BEGIN/ROLLBACK round trips around their one statement;
            # writes open a transaction explicitly.
            kwargs={"autocommit": True},
        )

    @contextmanager
    def setup_lock(self) -> Iterator[None]:
        """Serialise schema set-up across processes: concurrent ``CREATE TABLE IF NOT
        EXISTS`` on PostgreSQL can fail with a duplicate type error."""
        try:
            with psycopg.connect(self.url.conninfo, autocommit=True, connect_timeout=10) as conn:
                conn.execute("SELECT pg_advisory_lock(%s)", (SETUP_LOCK_ID,))
                try:
                    yield
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK_ID,))
        except psycopg.OperationalError as error:
            raise StoreUnavailable(str(error)) from error

    def ensure_schema(self) -> None:
        with psycopg.connect(self.url.conninfo, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.url.schema}"')

    @contextmanager
    def _cursor(self, *, write: bool) -> Iterator[Any]:
        try:
            self.pool.open(wait=False)
            with (
                self.pool.connection() as conn,
                conn.transaction() if write else contextlib.nullcontext(),
                conn.cursor() as cursor,
            ):
                yield _PgCursor(cursor)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as error:
            raise StoreUnavailable(str(error)) from error

    def transaction(self) -> Any:
        return self._cursor(write=True)

    def reading(self) -> Any:
        return self._cursor(write=False)

    def close(self) -> None:
        self.pool.close()
