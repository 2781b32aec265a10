"""PostgreSQL's bulk load (``COPY``) of projection rows: hostile values arrive intact,
and a value the server refuses fails the statement as bad data, not as an outage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from application.ports import CopiesRows
from infrastructure.sql.database import DatabaseUrl, PostgresDatabase
from projections.runner import is_outage

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

HOSTILE = ["a\tb", "x\ny", "c\rr", "back\\slash", "\\N", "\\", "\\t", "é ✓ \u2028", ""]


@pytest.fixture
def db(database_url: str) -> Iterator[PostgresDatabase]:
    database = PostgresDatabase(DatabaseUrl.parse(database_url))
    database.ensure_schema()
    with database.transaction() as cur:
        cur.execute("CREATE TABLE copied (n BIGINT NOT NULL, a TEXT, b TEXT NOT NULL)")
    yield database
    database.close()


def _rows(db: PostgresDatabase) -> list[tuple[Any, ...]]:
    with db.reading() as cur:
        cur.execute("SELECT n, a, b FROM copied ORDER BY n")
        return [tuple(row) for row in cur.fetchall()]


def test_hostile_values_and_nulls_arrive_as_given(db: PostgresDatabase) -> None:
    rows = [(i, None if i % 2 else value, value) for i, value in enumerate(HOSTILE)]
    with db.transaction() as cur:
        assert isinstance(cur, CopiesRows)
        cur.copy_rows("copied", ("n", "a", "b"), rows)
    assert _rows(db) == rows


def test_a_value_the_server_refuses_is_bad_data_and_nothing_lands(db: PostgresDatabase) -> None:
    with pytest.raises(Exception) as refused, db.transaction() as cur:
        assert isinstance(cur, CopiesRows)
        cur.copy_rows("copied", ("n", "a", "b"), [(1, "fine", "fine"), (2, "nul\x00", "x")])
    assert not is_outage(refused.value)
    assert _rows(db) == []
