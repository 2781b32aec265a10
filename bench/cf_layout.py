"""The custom-field read model alone: its rebuild against a plain loop writing the same
information one row per (entity, key), in the same run, on SQLite and PostgreSQL.

    python bench/cf_layout.py [--backend sqlite|postgresql|both] [--events N] [--rounds R]

tidings: ``app.projections.rebuild("custom_fields")`` (shadow tables, then the swap) of a
seeded log of N events, the custom-field mix of ``bench/projections.py`` (value sets on
many entities, ~6% clears, one delete and re-define of a key halfway). Its read model
keeps a JSON object per entity (every key's sealed value and digest) and the retention
clock (a row per live value with its set time).

Baseline: pages of 5,000 stored events read with plain SQL on its own connection,
orjson-decoded; per page the last op of each (entity, key) wins, then one delete of the
page's deleted definitions' rows, one delete of its cleared keys and one upsert of its
set keys (``unnest`` arrays on PostgreSQL, ``executemany`` on SQLite), and one tracking
update, in one transaction. Its row per (entity, key) holds the sealed value, digest,
definition, generation and set time: what the JSON row and the clock row hold together.
No definition check, no quarantine, no savepoints. Rebuild and loop alternate (loop
R + 1 times, tidings R times), best of each. Goal: events/s ratio >= 0.7.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench._common import (
    BACKENDS,
    Backend,
    Row,
    Scratch,
    alternating,
    environment,
    raw_connection,
    render,
    say,
    scratch_database,
    settle,
)
from bench._rebuild import CLEAR_TOPIC, DELETED_TOPIC, PAGE, SET_TOPIC, _micros, _transaction
from bench.projections import seed_mixed_log
from domain.field_definition import definition_id
from infrastructure.bootstrap import bootstrap, event_store
from infrastructure.eventstore.recorder import EVENTS_TABLE
from infrastructure.runtime.gc_policy import kept_heap

GOAL = 0.7
KEY = ("tenant_id", "entity_name", "entity_id", "field_key")


class _Sql:
    def __init__(self, pg: bool) -> None:
        p = "%s" if pg else "?"
        self.create = [
            "DROP TABLE IF EXISTS kv_values",
            "DROP TABLE IF EXISTS kv_tracking",
            "CREATE TABLE kv_values (tenant_id TEXT NOT NULL, entity_name TEXT NOT NULL,"
            " entity_id TEXT NOT NULL, field_key TEXT NOT NULL, sealed TEXT NOT NULL,"
            " digest TEXT NOT NULL, definition_id TEXT NOT NULL, generation INTEGER NOT NULL,"
            " set_at BIGINT NOT NULL,"
            f" PRIMARY KEY ({', '.join(KEY)})){'' if pg else ' WITHOUT ROWID'}",
            "CREATE TABLE kv_tracking (name TEXT PRIMARY KEY, position BIGINT NOT NULL)",
            "INSERT INTO kv_tracking VALUES ('kv', 0)",
        ]
        position = "notification_id" if pg else "rowid"
        self.select = (
            f"SELECT {position}, topic, state FROM {EVENTS_TABLE}"
            f" WHERE {position} > {p} AND topic IN ({p}, {p}, {p})"
            f" ORDER BY {position} LIMIT {PAGE}"
        )
        self.track = f"UPDATE kv_tracking SET position = {p} WHERE name = 'kv'"
        self.forget = f"DELETE FROM kv_values WHERE definition_id = {p}"
        upsert = (
            f" ON CONFLICT ({', '.join(KEY)}) DO UPDATE SET sealed = excluded.sealed,"
            " digest = excluded.digest, definition_id = excluded.definition_id,"
            " generation = excluded.generation, set_at = excluded.set_at"
        )
        if pg:
            self.clear = (
                "DELETE FROM kv_values AS v USING unnest(%b::text[], %b::text[], %b::text[],"
                " %b::text[]) AS u(t, e, i, k) WHERE v.tenant_id = u.t"
                " AND v.entity_name = u.e AND v.entity_id = u.i AND v.field_key = u.k"
            )
            self.set = (
                "INSERT INTO kv_values SELECT * FROM unnest(%b::text[], %b::text[],"
                " %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::int[],"
                " %b::bigint[])" + upsert
            )
        else:
            self.clear = (
                "DELETE FROM kv_values WHERE tenant_id = ? AND entity_name = ?"
                " AND entity_id = ? AND field_key = ?"
            )
            self.set = "INSERT INTO kv_values VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)" + upsert


class KeyRowLoop:
    """One full pass over the log into a fresh row-per-(entity, key) table; the value
    events it applied."""

    def __init__(self, scratch: Scratch) -> None:
        self.scratch = scratch
        self.pg = scratch.backend == "postgresql"
        self.sql = _Sql(self.pg)

    def __call__(self) -> int:
        conn = raw_connection(self.scratch)
        try:
            for statement in self.sql.create:
                conn.execute(statement)
            applied, position = 0, 0
            while True:
                with _transaction(conn, self.pg) as cur:
                    cur.execute(self.sql.select, (position, SET_TOPIC, CLEAR_TOPIC, DELETED_TOPIC))
                    rows = cur.fetchall()
                    if not rows:
                        return applied
                    applied += self._page(cur, rows)
                    position = rows[-1][0]
                    cur.execute(self.sql.track, (position,))
        finally:
            conn.close()

    def _page(self, cur: Any, rows: list[Any]) -> int:
        ops: dict[tuple[str, str, str, str], tuple[Any, ...] | None] = {}
        forgotten: list[str] = []
        for _, topic, state in rows:
            data = orjson.loads(state)
            tenant, entity, key = data["tenant_id"], data["entity_name"], data["field_key"]
            if topic == DELETED_TOPIC:  # the page's earlier ops of it go too
                gone = str(definition_id(tenant, entity, key))
                forgotten.append(gone)
                ops = {k: op for k, op in ops.items() if op is None or op[6] != gone}
                continue
            where = (tenant, entity, data["entity_id"], key)
            ops[where] = (
                (
                    *where,
                    data["sealed"],
                    data["digest"],
                    data["definition_id"],
                    data["generation"],
                    _micros(data["timestamp"]),
                )
                if topic == SET_TOPIC
                else None
            )
        for gone in forgotten:  # rare: one statement each
            cur.execute(self.sql.forget, (gone,))
        self._write(cur, self.sql.clear, [k for k, op in ops.items() if op is None])
        self._write(cur, self.sql.set, [op for op in ops.values() if op is not None])
        return len(rows) - len(forgotten)

    def _write(self, cur: Any, statement: str, rows: list[Any]) -> None:
        if not rows:
            return
        if self.pg:
            cur.execute(statement, [list(column) for column in zip(*rows, strict=True)])
        else:
            cur.executemany(statement, rows)


def _count(scratch: Scratch, table: str) -> int:
    conn = raw_connection(scratch)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def bench_backend(backend: Backend, events: int, rounds: int) -> Row:
    with scratch_database(backend, "cf_layout") as scratch:
        app = bootstrap(database_url=scratch.url, project_inline=False)
        try:
            say(f"[{backend}] seeding ~{events:,} events")
            counts = seed_mixed_log(app, events, chunk=5000)
            head = event_store(app).head()
            app.projections.catch_up()
            say(f"[{backend}] {head:,} events ({counts}); rebuild and loop alternately")
            loop = KeyRowLoop(scratch)
            applied: list[int] = []
            rebuild_s, loop_s = alternating(
                lambda: app.projections.rebuild("custom_fields"),
                lambda: applied.append(loop()),
                rounds=rounds,
                between=lambda: settle(scratch, vacuum=[EVENTS_TABLE]),
            )
            # The same information: a row per live value on both sides.
            live, rows = _count(scratch, "cf_value_clock"), _count(scratch, "kv_values")
            if live != rows:
                raise RuntimeError(f"{live} live values in tidings' clock, {rows} key rows")
        finally:
            app.close()
    ours, theirs = head / rebuild_s, head / loop_s
    say(f"[{backend}] rebuild {rebuild_s:.2f}s, loop {loop_s:.2f}s ({applied[-1]:,} values)")
    ratio = ours / theirs
    return Row(
        f"rebuild of the custom-field read model alone, {head:,} events (events/s)"
        " vs a row per (entity, key)",
        backend,
        f"{ours:,.0f}",
        f"{theirs:,.0f}",
        ratio,
        f">= {GOAL}",
        ratio >= GOAL,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--events", type=int, default=300_000, help="events in the log")
    parser.add_argument("--rounds", type=int, default=2, help="timed rebuilds (loop: one more)")
    args = parser.parse_args(argv)
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    with kept_heap():  # the heap policy of the processes that run projections, both sides
        rows = [bench_backend(backend, args.events, args.rounds) for backend in backends]
    render(
        "the custom-field read model alone vs a row per (entity, key) (same run, same machine)",
        rows,
        environment(backends),
        notes=[
            "tidings: projections.rebuild('custom_fields'): a JSON object per entity and "
            "the retention clock, shadow tables then the swap. Loop: pages of 5,000, one "
            "row per (entity, key) with value, digest, definition, generation and set "
            "time; per page one delete and one upsert, one tracking update, one "
            "transaction; no definition check, no quarantine.",
            "the process runs with the worker's heap policy (gc_policy.kept_heap, as "
            "`tidings worker`, `projections run` and `rebuild` do), both sides alike.",
            f"total wall time {time.perf_counter() - started:.0f}s;"
            " exit status 1 when a goal is missed",
        ],
    )
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
