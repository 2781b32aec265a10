"""Reading streams stays an index lookup as the log grows (PostgreSQL).

A statement prepared on a connection gets a generic plan after five runs, planned for
the table as it is then. Planned on a nearly empty log, the join of the wanted streams
with the log hashes the whole table; with autovacuum off nothing plans it again, so every
load then reads the whole log and writes slow down as the store grows."""

from __future__ import annotations

import time
from uuid import uuid4

import psycopg
import pytest

from application.app import App
from infrastructure.eventstore.recorder import EVENTS_TABLE
from tests.conftest import PG_DSN
from tests.integration.eventstore.test_eventstore import event, store_of

GROWN_BY = 50_000


def _scanned(conn: psycopg.Connection[tuple[int, int]], schema: str) -> tuple[int, int]:
    """Rows read by whole-table scans, and scans of any kind, of the log."""
    row = conn.execute(
        "SELECT seq_tup_read, seq_scan + coalesce(idx_scan, 0) FROM pg_stat_user_tables"
        " WHERE schemaname = %s AND relname = %s",
        (schema, EVENTS_TABLE),
    ).fetchone()
    assert row is not None
    return row


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_loading_new_streams_reads_no_whole_log_after_it_grew(app: App, database_url: str) -> None:
    store = store_of(app)
    for _ in range(3):
        store.append([event(uuid4(), 1)])
    for _ in range(30):  # prepared and planned while the log is three events long
        store.load_many([uuid4(), uuid4()])
    schema = database_url.rsplit("schema=", 1)[1]
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}"."{EVENTS_TABLE}"'
            " (originator_id, originator_version, topic, state)"
            " SELECT gen_random_uuid(), 1, 'bulk', '\\x00'::bytea"
            " FROM generate_series(1, %s)",
            (GROWN_BY,),
        )
        rows_before, scans_before = _scanned(conn, schema)
        deadline = time.monotonic() + 30
        loads = 0
        # A backend reports its table counters at most once a second: load until twenty
        # scans have shown.
        while _scanned(conn, schema)[1] < scans_before + 20 and time.monotonic() < deadline:
            store.load_many([uuid4(), uuid4()])
            loads += 1
            time.sleep(0.05)
        rows_after, scans_after = _scanned(conn, schema)
    assert scans_after >= scans_before + 20, f"{loads} loads never showed as scans"
    assert rows_after - rows_before < GROWN_BY, (
        f"{loads} loads read {rows_after - rows_before:,} rows of the log by scanning it whole"
    )
