"""Every row of every table of a test's database, as text: for scans that prove a
plaintext is nowhere in the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg

from infrastructure.sql.database import DatabaseUrl


def dump_database(database_url: str) -> Iterator[tuple[str, str]]:
    """(table, text of one row) for every row of every table of the test's database."""
    url = DatabaseUrl.parse(database_url)
    if url.dialect == "sqlite":
        assert url.sqlite_path is not None
        conn = sqlite3.connect(url.sqlite_path)
        try:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            for table in tables:
                for row in conn.execute(f'SELECT * FROM "{table}"'):
                    yield table, _text(row)
        finally:
            conn.close()
        return
    with psycopg.connect(url.conninfo) as pg:
        tables = [
            r[0]
            for r in pg.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (url.schema,),
            )
        ]
        for table in tables:
            for row in pg.execute(f'SELECT * FROM "{url.schema}"."{table}"'):
                yield table, _text(row)


def _text(row: tuple[Any, ...]) -> str:
    parts = []
    for value in row:
        if isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(value)
            parts.append(raw.decode("utf-8", "replace") + raw.decode("latin-1"))
        else:
            parts.append(str(value))
    return "\x1f".join(parts)
