"""Projection and write-path benchmarks, tidings against a hand-written baseline, side by
side in one run, on SQLite and PostgreSQL.

    python bench/projections.py [--backend sqlite|postgresql|both] [--events N]
                                [--entities N] [--defines N] [--quick]

1. rebuild: ``app.projections.rebuild()`` of an N-event log (default 200k) against a
   raw loop (pages of 1,000 stored events read with plain SQL, json-decoded, one upsert
   per value event into a scratch table, one transaction per page). Goal: >= 0.5x.
2. cascade: ``catch_up()`` of a ``delete-tenant-field`` whose key is set on N entities
   (default 100k) against one hand-written set-based UPDATE on a copy of the same table.
   Goal: <= 1.5x the baseline's time.
3. define latency: ``app.write("define-tenant-field")`` (projection not included) against
   eventsourcing's ``Application.save()`` of one event. Goal: median <= 2x.

Each benchmark gets a fresh SQLite file or PostgreSQL schema, removed afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from application.users import SYSTEM_TENANT_ID, User
from bench._common import (
    BACKENDS,
    Backend,
    Row,
    Scratch,
    ValueSeeder,
    admin_of,
    alternating,
    environment,
    field_spec,
    median,
    percentile,
    raw_connection,
    render,
    sample_value,
    sandwich,
    say,
    scratch_database,
    settle,
    timed,
)
from domain.custom_field_values import CustomFieldValueSet
from infrastructure.bootstrap import bootstrap, event_store
from infrastructure.eventstore.recorder import EVENTS_TABLE

PAGE = 1000
REBUILD_ROUNDS = 2  # tidings twice, the baseline three times, best of each
OPERATOR = User(id="operator", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))


def _ok(result: Any) -> Any:
    if not result.is_success:
        raise RuntimeError(f"seeding write failed: {result.error}")
    return result.data


def _define(
    app: Any,
    user: User,
    entity: str,
    key: str,
    field_type: str,
    handler: str = "define-tenant-field",
) -> int:
    data = _ok(
        app.write(
            handler,
            {
                "entityName": entity,
                "fieldKey": key,
                "field": field_spec(field_type),
                "searchable": True,
            },
            user,
        )
    )
    return int(data["generation"])


# --- 1. rebuild ---------------------------------------------------------------------------

ENTITY_KEYS = {
    "contact": [
        ("tier", "enum"),
        ("score", "number"),
        ("vip", "boolean"),
        ("note", "text"),
        ("source", "text"),
        ("age", "number"),
        ("city", "text"),
        ("active", "boolean"),
    ],
    "deal": [("stage", "enum"), ("amount", "number"), ("owner", "text"), ("won", "boolean")],
}
SYSTEM_KEY = ("contact", "region", "text")


def seed_mixed_log(app: Any, target: int, tenants: int = 4, seed: int = 7) -> dict[str, int]:
    """A realistic mix: a few tenants with their definitions and a system field; value
    sets (and ~6% clears) spread over many entities; halfway through, one key is deleted
    (a cascade over its values) and re-defined with another type (generation 2)."""
    rng = random.Random(seed)
    names = [f"tenant-{i}" for i in range(tenants)]
    # (owner, entity, key) -> [generation, field type]
    fields: dict[tuple[str, str, str], list[Any]] = {}
    entity, key, field_type = SYSTEM_KEY
    fields[(SYSTEM_TENANT_ID, entity, key)] = [
        _define(app, OPERATOR, entity, key, field_type, handler="define-system-field"),
        field_type,
    ]
    for tenant in names:
        for entity, keys in ENTITY_KEYS.items():
            for key, field_type in keys:
                fields[(tenant, entity, key)] = [
                    _define(app, admin_of(tenant), entity, key, field_type),
                    field_type,
                ]
    values = target - event_store(app).head()
    pool = max(100, target // 40)  # entities per (tenant, entity name): ~5 events each
    seeder = ValueSeeder(app.ctx.store, chunk=500, ctx=app.ctx)
    victim = (names[0], "contact", "tier")
    counts = {"sets": 0, "clears": 0}
    while seeder.appended + len(seeder.pending) < values:
        if seeder.appended >= values // 2 and fields[victim][0] == 1:
            seeder.flush()
            _ok(
                app.write(
                    "delete-tenant-field",
                    {"entityName": "contact", "fieldKey": "tier"},
                    admin_of(victim[0]),
                )
            )
            # A deleted key may come back with any type; it starts empty (generation 2).
            fields[victim] = [_define(app, admin_of(victim[0]), "contact", "tier", "text"), "text"]
            values -= 4
        tenant = names[min(int(rng.expovariate(1.2)), tenants - 1)]  # uneven tenants
        entity = "contact" if rng.random() < 0.75 else "deal"
        entity_id = f"{entity[0]}{rng.randrange(pool):07d}"
        if entity == "contact" and rng.random() < 0.08:
            owner, key = SYSTEM_TENANT_ID, SYSTEM_KEY[1]
        else:
            owner, key = tenant, rng.choice(ENTITY_KEYS[entity])[0]
        generation, field_type = fields[(owner, entity, key)]
        if rng.random() < 0.06 and seeder.clear(
            tenant, entity, entity_id, key, generation, owner=owner
        ):
            counts["clears"] += 1
            continue
        seeder.set(
            tenant, entity, entity_id, key, generation, sample_value(field_type, rng), owner=owner
        )
        counts["sets"] += 1
    seeder.flush()
    counts["entities"] = len(seeder.versions)
    return counts


@contextlib.contextmanager
def _raw_transaction(conn: Any, pg: bool) -> Iterator[Any]:
    if pg:
        with conn.transaction(), conn.cursor() as cur:
            yield cur
        return
    conn.execute("BEGIN IMMEDIATE")
    cur = conn.cursor()
    try:
        yield cur
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _raw_rebuild(scratch: Scratch) -> int:
    """The baseline: what a hand-written batched projector costs on this backend."""
    pg = scratch.backend == "postgresql"
    conn = raw_connection(scratch)
    p = "%s" if pg else "?"
    position_column = "notification_id" if pg else "rowid"
    value_type = "JSONB" if pg else "TEXT"
    set_topic = CustomFieldValueSet.TOPIC
    try:
        conn.execute("DROP TABLE IF EXISTS bench_raw_values")
        conn.execute(
            f"CREATE TABLE bench_raw_values (tenant_id TEXT NOT NULL,"
            " entity_name TEXT NOT NULL, entity_id TEXT NOT NULL,"
            f" field_key TEXT NOT NULL, value {value_type} NOT NULL,"
            " PRIMARY KEY (tenant_id, entity_name, entity_id, field_key))"
        )
        select = (
            f"SELECT {position_column}, topic, state FROM {EVENTS_TABLE}"
            f" WHERE {position_column} > {p} ORDER BY {position_column} LIMIT {PAGE}"
        )
        upsert = (
            "INSERT INTO bench_raw_values"
            " (tenant_id, entity_name, entity_id, field_key, value)"
            f" VALUES ({p}, {p}, {p}, {p}, {p}{'::jsonb' if pg else ''})"
            " ON CONFLICT (tenant_id, entity_name, entity_id, field_key)"
            " DO UPDATE SET value = excluded.value"
        )
        position, seen = 0, 0
        while True:
            with _raw_transaction(conn, pg) as cur:
                cur.execute(select, (position,))
                rows = cur.fetchall()
                upserts = []
                for _, topic, state in rows:
                    if topic != set_topic:
                        continue
                    data = json.loads(bytes(state))
                    upserts.append(
                        (
                            data["tenant_id"],
                            data["entity_name"],
                            data["entity_id"],
                            data["field_key"],
                            json.dumps({"s": data["sealed"], "d": data["digest"]}),
                        )
                    )
                if upserts:
                    cur.executemany(upsert, upserts)
            if not rows:
                return seen
            seen += len(rows)
            position = rows[-1][0]
    finally:
        conn.close()


def bench_rebuild(backend: Backend, events: int) -> Row:
    with scratch_database(backend, "rebuild") as scratch:
        app = bootstrap(database_url=scratch.url, project_inline=False)
        try:
            say(f"[{backend}] rebuild: seeding ~{events:,} events")
            counts: dict[str, int] = {}
            seconds = timed(lambda: counts.update(seed_mixed_log(app, events)))
            head = event_store(app).head()
            say(
                f"[{backend}] seeded {head:,} events in {seconds:.1f}s "
                f"({head / seconds:,.0f}/s; {counts})"
            )
            say(f"[{backend}] rebuild: baseline and tidings alternately, best of each")
            seen: list[int] = []
            tidings_s, raw_s = alternating(
                app.projections.rebuild,
                lambda: seen.append(_raw_rebuild(scratch)),
                rounds=REBUILD_ROUNDS,
                between=lambda: settle(scratch, vacuum=[EVENTS_TABLE]),
            )
            if seen != [head] * (REBUILD_ROUNDS + 1):
                raise RuntimeError(f"baseline read {seen} events, the log has {head}")
            if _count(scratch, "cf_entity_values") == 0:
                raise RuntimeError("the rebuild produced no entity rows")
        finally:
            app.close()
    ours, theirs = head / tidings_s, head / raw_s
    ratio = ours / theirs
    return Row(
        f"rebuild {head:,} events (events/s)",
        backend,
        f"{ours:,.0f}",
        f"{theirs:,.0f}",
        ratio,
        ">= 0.5x",
        ratio >= 0.5,
    )


def _count(scratch: Scratch, table: str, where: str = "") -> int:
    conn = raw_connection(scratch)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table} {where}").fetchone()[0])
    finally:
        conn.close()


# --- 2. cascade ---------------------------------------------------------------------------


def bench_cascade(backend: Backend, entities: int) -> Row:
    pg = backend == "postgresql"
    tenant, entity = "tenant-cascade", "contact"
    with scratch_database(backend, "cascade") as scratch:
        app = bootstrap(database_url=scratch.url, project_inline=False)
        try:
            admin = admin_of(tenant)
            generation = _define(app, admin, entity, "doomed", "text")
            other = _define(app, admin, entity, "kept", "number")
            say(f"[{backend}] cascade: seeding {entities:,} entities")
            seeder = ValueSeeder(app.ctx.store, chunk=500, ctx=app.ctx)
            rng = random.Random(11)
            for i in range(entities):
                entity_id = f"e{i:07d}"
                seeder.set(
                    tenant, entity, entity_id, "doomed", generation, sample_value("text", rng)
                )
                if i % 10 == 0:  # some rows hold another key, which must stay
                    seeder.set(tenant, entity, entity_id, "kept", other, i)
            seeder.flush()
            caught = timed(app.projections.catch_up)
            say(
                f"[{backend}] caught up {seeder.appended:,} value events in {caught:.1f}s "
                f"({seeder.appended / caught:,.0f}/s)"
            )
            copies = ["bench_cascade_a", "bench_cascade_b"]
            for copy in copies:
                _copy_values(scratch, copy)
            _ok(
                app.write(
                    "delete-tenant-field", {"entityName": entity, "fieldKey": "doomed"}, admin
                )
            )
            say(f"[{backend}] cascade: baseline, tidings, baseline")
            tidings_s, raw_s = sandwich(
                app.projections.catch_up,
                lambda: _raw_cascade(scratch, copies.pop(0), tenant, entity, "doomed"),
                between=lambda: settle(scratch),
            )

            has_key = (
                "WHERE jsonb_exists(fields, 'doomed')"
                if pg
                else "WHERE json_type(fields, '$.\"doomed\"') IS NOT NULL"
            )
            left = [
                _count(scratch, table, has_key)
                for table in ("cf_entity_values", "bench_cascade_a", "bench_cascade_b")
            ]
            kept = _count(scratch, "cf_entity_values", has_key.replace("doomed", "kept"))
            if left != [0, 0, 0] or kept != (entities + 9) // 10:
                raise RuntimeError(f"cascade incomplete: left {left}, kept {kept}")
        finally:
            app.close()
    ratio = tidings_s / raw_s
    return Row(
        f"cascade over {entities:,} entities (ms)",
        backend,
        f"{tidings_s * 1e3:,.0f}",
        f"{raw_s * 1e3:,.0f}",
        ratio,
        "<= 1.5x",
        ratio <= 1.5,
    )


def _copy_values(scratch: Scratch, copy: str) -> None:
    """A copy of the serving values table, same shape and key, for the baseline."""
    pg = scratch.backend == "postgresql"
    conn = raw_connection(scratch)
    try:
        conn.execute(f"DROP TABLE IF EXISTS {copy}")
        conn.execute(
            f"CREATE TABLE {copy} (tenant_id TEXT NOT NULL,"
            " entity_name TEXT NOT NULL, entity_id TEXT NOT NULL,"
            f" fields {'JSONB' if pg else 'TEXT'} NOT NULL,"
            " PRIMARY KEY (tenant_id, entity_name, entity_id))"
        )
        conn.execute(
            f"INSERT INTO {copy} SELECT tenant_id, entity_name, entity_id, fields"
            " FROM cf_entity_values"
        )
        if pg:  # the same housekeeping state for every table
            for table in ("cf_entity_values", copy):
                conn.execute(f"VACUUM ANALYZE {table}")
    finally:
        conn.close()


def _raw_cascade(scratch: Scratch, copy: str, tenant: str, entity: str, key: str) -> None:
    conn = raw_connection(scratch)
    try:
        if scratch.backend == "postgresql":
            with conn.transaction():
                conn.execute(
                    f"UPDATE {copy} SET fields = fields - %s::text"
                    " WHERE tenant_id = %s AND entity_name = %s"
                    " AND jsonb_exists(fields, %s::text)",
                    (key, tenant, entity, key),
                )
        else:
            path = f'$."{key}"'
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                f"UPDATE {copy} SET fields = json_remove(fields, ?)"
                " WHERE tenant_id = ? AND entity_name = ?"
                " AND json_type(fields, ?) IS NOT NULL",
                (path, tenant, entity, path),
            )
            conn.execute("COMMIT")
    finally:
        conn.close()


# --- 3. define latency --------------------------------------------------------------------


def bench_define(backend: Backend, defines: int, existing: int = 20, warmup: int = 10) -> Row:
    """Interleaved: one timed define, then one timed bare save, and so on, so that load
    from other processes on the machine hits both sides alike."""
    tenant = "tenant-define"
    with scratch_database(backend, "define") as scratch:
        app = bootstrap(
            database_url=scratch.url, project_inline=False, blob_dir=scratch.workdir / "blobs"
        )
        es_app = BenchApp(env=_eventsourcing_env(scratch))
        try:
            admin = admin_of(tenant)
            for i in range(existing):
                _define(app, admin, "contact", f"pre{i}", "text")
            counter = Counter()
            es_app.save(counter)
            say(f"[{backend}] define: {defines} timed defines, each beside a bare save")
            samples: list[float] = []
            baseline: list[float] = []
            for i in range(warmup + defines):
                payload = {
                    "entityName": "contact",
                    "fieldKey": f"k{i}",
                    "field": {"type": "text", "maxLength": 200},
                    "label": f"Key {i}",
                }
                start = time.perf_counter()
                result = app.write("define-tenant-field", payload, admin)
                ours = time.perf_counter() - start
                _ok(result)
                counter.bump()
                start = time.perf_counter()
                es_app.save(counter)
                theirs = time.perf_counter() - start
                if i >= warmup:
                    samples.append(ours)
                    baseline.append(theirs)
        finally:
            es_app.close()
            app.close()
    ours, theirs = median(samples), median(baseline)
    ratio = ours / theirs
    return Row(
        "define-tenant-field median ms (p90)",
        backend,
        f"{ours * 1e3:.2f} ({percentile(samples, 90) * 1e3:.2f})",
        f"{theirs * 1e3:.2f} ({percentile(baseline, 90) * 1e3:.2f})",
        ratio,
        "<= 2x",
        ratio <= 2.0,
    )


def _eventsourcing_env(scratch: Scratch) -> dict[str, str]:
    """eventsourcing's own write path on the same backend: ``Application.save()``."""
    url = scratch.parsed
    if url.dialect == "sqlite":
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(scratch.workdir / "eventsourcing.db"),
        }
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": url.dbname,
        "POSTGRES_HOST": url.host,
        "POSTGRES_PORT": str(url.port),
        "POSTGRES_USER": url.user,
        "POSTGRES_PASSWORD": url.password or "unused-under-trust",
        "POSTGRES_SCHEMA": url.schema,
    }


class Counter(Aggregate):
    @event("Bumped")
    def bump(self) -> None:
        pass


class BenchApp(Application[Any]):
    pass


# --- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--events", type=int, help="events in the rebuilt log (200k; quick 20k)")
    parser.add_argument("--entities", type=int, help="entities in the cascade (100k; quick 10k)")
    parser.add_argument("--defines", type=int, help="timed defines (300; quick 100)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--only",
        choices=["rebuild", "cascade", "define"],
        action="append",
        help="run only these benchmarks (repeatable)",
    )
    args = parser.parse_args(argv)
    events = args.events or (20_000 if args.quick else 200_000)
    entities = args.entities or (10_000 if args.quick else 100_000)
    defines = args.defines or (100 if args.quick else 300)
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]
    only = set(args.only or ["rebuild", "cascade", "define"])

    started = time.perf_counter()
    rows: list[Row] = []
    plan: list[tuple[str, Callable[[Backend], Row]]] = [
        ("rebuild", lambda b: bench_rebuild(b, events)),
        ("cascade", lambda b: bench_cascade(b, entities)),
        ("define", lambda b: bench_define(b, defines)),
    ]
    for name, run in plan:
        if name in only:
            rows.extend(run(backend) for backend in backends)
    elapsed = time.perf_counter() - started
    render(
        "tidings projections & write path vs hand-written baselines (same run, same machine)",
        rows,
        environment(backends),
        notes=[
            "rebuild: app.projections.rebuild() of every read model (custom fields + mail: "
            "shadow tables, then swap) vs a raw loop (pages of "
            f"{PAGE} read with plain SQL, json-decoded, executemany upsert of each value "
            "event into a scratch table, one transaction per page); run alternately "
            f"(baseline x{REBUILD_ROUNDS + 1}, tidings x{REBUILD_ROUNDS}), best run of each.",
            "cascade: catch_up() of one delete-tenant-field (the delete written untimed) vs "
            "one hand-written set-based UPDATE on a copy of the same table; run baseline, "
            "tidings, baseline (each baseline on its own copy), the baseline's mean.",
            "define: app.write('define-tenant-field') with project_inline=False - projection "
            "NOT included - in a tenant holding 30 definitions, 330 by the end; baseline "
            "eventsourcing "
            "Application.save() of one event, same backend; the two timed alternately.",
            f"total wall time {elapsed:.0f}s; exit status 1 when a goal is missed",
        ],
    )
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
