"""Array literals built by hand read back exactly on PostgreSQL: any text (quotes,
backslashes, braces, commas, spaces, the word NULL, the empty string), ints and UUIDs."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import uuid4

import psycopg
import pytest

from infrastructure.sql.array_literal import plain, quoted
from tests.conftest import PG_DSN

HOSTILE = ['a"b', "c\\d", "NULL", "", " padded ", "{}", "x,y", '\\"', "é\u2028", "tab\there"]


@pytest.fixture
def pg() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        yield conn


def test_any_text_reads_back_as_it_was(pg: psycopg.Connection[tuple[object, ...]]) -> None:
    row = pg.execute("SELECT %s::text[]", (quoted(HOSTILE),)).fetchone()
    assert row is not None and row[0] == HOSTILE


def test_ints_and_uuids_read_back_and_empty_is_empty(
    pg: psycopg.Connection[tuple[object, ...]],
) -> None:
    ids = [uuid4(), uuid4()]
    row = pg.execute(
        "SELECT %s::bigint[], %s::uuid[], %s::int[]", (plain([-1, 0, 2**40]), plain(ids), plain([]))
    ).fetchone()
    assert row == ([-1, 0, 2**40], ids, [])
