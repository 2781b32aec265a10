"""Projection and write-path benchmarks, tidings against a hand-written baseline, side by
side in one run, on SQLite and PostgreSQL.

    python bench/projections.py [--backend sqlite|postgresql|both] [--events N]
                                [--mix cf|mail|both] [--es-events N]
                                [--entities N] [--defines N] [--quick]

1. rebuild and catch-up: ``app.projections.rebuild()`` and ``catch_up()`` from position
   0 of an N-event log (default 1,000,000; a custom-field mix and a mail mix) against a
   strong raw loop (``bench/_rebuild.py``: pages of 5,000, orjson, one set-based statement
   per table per page, one tracking update). Goal: >= 0.7x. On PostgreSQL also against
   eventsourcing's own ``ProjectionRunner`` with an equivalent projection, timed over
   the log's first ``--es-events`` (default 10k). Goal: >= 50x.
2. cascade: ``catch_up()`` of a ``delete-tenant-field`` whose key is set on N entities
   (default 100k) against one hand-written set-based UPDATE on a copy of the same table.
   Goal: <= 1.5x the baseline's time.
3. define latency: ``app.write("define-tenant-field")`` (projection not included) against
   eventsourcing's ``Application.save()`` of one event. Goal: median <= 2x.

Each benchmark gets a fresh SQLite file or PostgreSQL schema, removed afterwards.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
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
from bench._rebuild import PAGE, MailSeeder, RawLoop, es_runner_rate
from infrastructure.bootstrap import bootstrap, event_store
from infrastructure.eventstore.recorder import EVENTS_TABLE
from infrastructure.runtime.gc_policy import kept_heap

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


def seed_mixed_log(
    app: Any, target: int, tenants: int = 4, seed: int = 7, chunk: int = 500
) -> dict[str, int]:
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
    seeder = ValueSeeder(app.ctx.store, chunk=chunk, ctx=app.ctx)
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


def _reset_projections(app: Any, scratch: Scratch) -> Any:
    """Every read model back to empty at position 0 (tables dropped, tracking and
    quarantine rows deleted), then a fresh app, whose set-up creates them again: the
    start of a catch-up from scratch."""
    runner = app.projections
    tables = [t for p in runner.projections.values() for t in p.tables.values()]
    names = list(runner.projections)
    app.close()
    conn = raw_connection(scratch)
    try:
        for table in tables:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        marks = ", ".join(["%s" if scratch.backend == "postgresql" else "?"] * len(names))
        conn.execute(f"DELETE FROM projection_tracking WHERE name IN ({marks})", names)
        conn.execute(f"DELETE FROM projection_quarantine WHERE projection IN ({marks})", names)
    finally:
        conn.close()
    return bootstrap(database_url=scratch.url, project_inline=False)


def _seed(app: Any, mix: str, events: int) -> dict[str, int]:
    if mix == "mail":
        seeder = MailSeeder(app)
        seeder.seed(events)
        return {
            "messages": seeder.appended - len(seeder.accounts),
            "accounts": len(seeder.accounts),
        }
    return seed_mixed_log(app, events, chunk=5000)


def bench_throughput(
    backend: Backend, mix: str, events: int, es_events: int, rounds: int = REBUILD_ROUNDS
) -> list[Row]:
    """Rebuild and catch-up of the whole log against the raw loop (and, for the
    custom-field mix on PostgreSQL, against eventsourcing's ProjectionRunner)."""
    label = "custom-field" if mix == "cf" else "mail"
    with scratch_database(backend, f"rebuild_{mix}") as scratch:
        app = bootstrap(database_url=scratch.url, project_inline=False)
        try:
            say(f"[{backend}] {label} mix: seeding ~{events:,} events")
            counts: dict[str, int] = {}
            seconds = timed(lambda: counts.update(_seed(app, mix, events)))
            head = event_store(app).head()
            say(
                f"[{backend}] seeded {head:,} events in {seconds:.1f}s"
                f" ({head / seconds:,.0f}/s; {counts})"
            )
            raw = RawLoop(scratch)
            seen: list[int] = []
            say(f"[{backend}] rebuild: raw loop and tidings alternately, best of each")
            rebuild_s, raw_s = alternating(
                app.projections.rebuild,
                lambda: seen.append(raw()),
                rounds=rounds,
                between=lambda: settle(scratch, vacuum=[EVENTS_TABLE]),
            )
            if seen != [head] * (rounds + 1):
                raise RuntimeError(f"the raw loop read {seen} events, the log has {head}")
            say(f"[{backend}] catch-up from position 0 into fresh read models")
            catch_up_s = []
            for _ in range(rounds):
                app = _reset_projections(app, scratch)
                settle(scratch, vacuum=[EVENTS_TABLE])
                catch_up_s.append(timed(app.projections.catch_up))
            _check_read_models(scratch, mix)
            es: tuple[int, float] | None = None
            if backend == "postgresql" and mix == "cf" and es_events:
                upto = min(es_events, head)
                say(f"[{backend}] eventsourcing's ProjectionRunner over the first {upto:,} events")
                settle(scratch, vacuum=[EVENTS_TABLE])
                es = es_runner_rate(scratch, upto)
        finally:
            app.close()
    theirs = head / raw_s
    rows = []
    for what, seconds_taken in (("rebuild", rebuild_s), ("catch-up", min(catch_up_s))):
        ours = head / seconds_taken
        rows.append(
            Row(
                f"{what} {head:,} events, {label} mix (events/s) vs raw loop",
                backend,
                f"{ours:,.0f}",
                f"{theirs:,.0f}",
                ours / theirs,
                ">= 0.7x",
                ours / theirs >= 0.7,
            )
        )
    if es is not None:
        ours, library = head / rebuild_s, es[0] / es[1]
        rows.append(
            Row(
                f"rebuild {head:,} events vs eventsourcing ProjectionRunner "
                f"(its rate over the first {es[0]:,})",
                backend,
                f"{ours:,.0f}",
                f"{library:,.0f}",
                ours / library,
                ">= 50x",
                ours / library >= 50,
            )
        )
    return rows


def _check_read_models(scratch: Scratch, mix: str) -> None:
    """The last run filled the read models as the raw loop filled its tables."""
    pairs = (
        [("cf_entity_values", "raw_values", ""), ("cf_value_clock", "raw_value_clock", "")]
        if mix == "cf"
        else [("mail_messages", "raw_messages", ""), ("mail_threads", "raw_threads", "")]
    )
    public = "WHERE type IN ('custom_field_value.set', 'custom_field_value.cleared',"
    public += " 'message.received')"
    for ours, theirs, where in [*pairs, ("feed_items", "raw_feed", public)]:
        if _count(scratch, ours, where) != _count(scratch, theirs):
            raise RuntimeError(
                f"{ours} and {theirs} differ in their row counts:"
                f" {_count(scratch, ours, where)} and {_count(scratch, theirs)}"
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
    parser.add_argument(
        "--events", type=int, help="events in each rebuilt log (1,000,000; quick 20k)"
    )
    parser.add_argument(
        "--es-events",
        type=int,
        help="events eventsourcing's ProjectionRunner is timed over (10k; quick 3k; 0: skip)",
    )
    parser.add_argument("--mix", choices=["cf", "mail", "both"], default="both")
    parser.add_argument(
        "--rounds", type=int, default=REBUILD_ROUNDS, help="timed runs of tidings (raw: one more)"
    )
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
    events = args.events or (20_000 if args.quick else 1_000_000)
    es_events = args.es_events if args.es_events is not None else (3_000 if args.quick else 10_000)
    mixes = ["cf", "mail"] if args.mix == "both" else [args.mix]
    entities = args.entities or (10_000 if args.quick else 100_000)
    defines = args.defines or (100 if args.quick else 300)
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]
    only = set(args.only or ["rebuild", "cascade", "define"])

    started = time.perf_counter()
    rows: list[Row] = []
    plan: list[tuple[str, Callable[[Backend], Row]]] = [
        ("cascade", lambda b: bench_cascade(b, entities)),
        ("define", lambda b: bench_define(b, defines)),
    ]
    # The heap policy of the processes that run projections (the worker, `projections
    # run` and `rebuild`), for both sides of every row.
    with kept_heap():
        if "rebuild" in only:
            for mix in mixes:
                for backend in backends:
                    rows.extend(bench_throughput(backend, mix, events, es_events, args.rounds))
        for name, run in plan:
            if name in only:
                rows.extend(run(backend) for backend in backends)
    elapsed = time.perf_counter() - started
    render(
        "tidings projections & write path vs hand-written baselines (same run, same machine)",
        rows,
        environment(backends),
        notes=[
            "rebuild: app.projections.rebuild() of every read model (custom fields, mail, "
            "feed: shadow tables, then swap); catch-up: app.projections.catch_up() from "
            "position 0 into fresh read models. Raw loop: pages of "
            f"{PAGE:,} read with plain SQL, orjson-decoded, one set-based statement per "
            "table per page (unnest on PostgreSQL, executemany on SQLite: values or "
            "messages/threads/accounts, and feed rows), one tracking update, one "
            "transaction per page, no definition check, no quarantine. Rebuild and raw "
            f"loop alternately (raw x{args.rounds + 1}, tidings x{args.rounds}), "
            f"best of each; catch-up best of {args.rounds}.",
            "eventsourcing: its ProjectionRunner (PostgreSQL only: its SQLite recorder has "
            "no subscriptions) with an equivalent projection (value upsert + feed row + "
            "tracking, one transaction per event, topic-filtered) over the first "
            f"{es_events:,} events of the custom-field log; its rate there is compared.",
            "cascade: catch_up() of one delete-tenant-field (the delete written untimed) vs "
            "one hand-written set-based UPDATE on a copy of the same table; run baseline, "
            "tidings, baseline (each baseline on its own copy), the baseline's mean.",
            "define: app.write('define-tenant-field') with project_inline=False - projection "
            "NOT included - in a tenant holding 30 definitions, 330 by the end; baseline "
            "eventsourcing "
            "Application.save() of one event, same backend; the two timed alternately.",
            "the process runs with the worker's heap policy (infrastructure/runtime/"
            "gc_policy.kept_heap, as `tidings worker`, `projections run` and `rebuild` do), "
            "both sides alike.",
            f"total wall time {elapsed:.0f}s; exit status 1 when a goal is missed",
        ],
    )
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
