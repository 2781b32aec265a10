"""Retention benchmark: the sweeper against a hand-written set-based statement on the same
tables, side by side in one run, on SQLite and PostgreSQL.

    python bench/retention.py [--backend sqlite|postgresql|both] [--values N]
                              [--bodies N] [--batch-size N]

values: N custom-field values (default 1,000,000), one per entity in two tenants, all
set more than 30 days before the sweep under a field whose retention is ``30d``
``delete``. tidings: one ``RetentionSweeper.run()`` (``bootstrap.retention_sweeper``,
batches of ``--batch-size``: one statement over the value clock with each entity's
stream version, one append of the expiries each; a ``load_many`` only for a batch whose
streams moved past the read model), then ``app.projections.catch_up()`` so the read models
(values, clock, feed) show them. Baseline: on copies of the same two tables, one
``UPDATE`` removing the key from every entity whose clock row is due and one ``DELETE``
of those clock rows, in one transaction (no events, no feed). Goal: >= 0.7 of the
baseline's rate.

bodies: N ingested messages (default 100,000) in 40 accounts of 4 tenants, each with a
real sealed body (packs of 5,000, as a worker's group commit stores them), all received
more than 30 days before the sweep under an operator default ``bodiesFor`` of ``30d``.
tidings: one ``RetentionSweeper.run()`` (the ``mail_bodies`` kind: one statement along
its partial index, one ``load_many``, the blobs destroyed, one append of
``MessageBodyErased`` each batch), then ``catch_up()``. Baseline: on a copy of
``mail_messages``, one ``UPDATE`` clearing every due row's body (PostgreSQL:
``RETURNING`` the refs; SQLite: the refs read first, in the same transaction) and one
batched ``DELETE`` of their keys from a copy of ``message_keys``, then
each ref's bytes overwritten in its pack, one open and one fsync per pack file. Goal:
>= 0.7 of the baseline's rate.

Each run gets a fresh SQLite file or PostgreSQL schema, removed afterwards; baseline,
tidings, baseline (each baseline on its own copy), the baseline's mean. On PostgreSQL
tidings' tables are analyzed before the timed part, as the copies are when made.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from application.mail.ports import BlobOwner
from bench._common import (
    BACKENDS,
    Backend,
    Row,
    Scratch,
    ValueSeeder,
    admin_of,
    environment,
    raw_connection,
    render,
    sample_value,
    sandwich,
    say,
    scratch_database,
    settle,
    timed,
)
from bench._rebuild import MailSeeder
from domain.events import DomainEvent
from domain.message import MessageIngested
from infrastructure import bootstrap as wiring
from infrastructure.blobs.keyed_refs import KeyedRef
from infrastructure.bootstrap import bootstrap
from infrastructure.crypto.body_keys import BODY_KEYS_TABLE, body_key_id
from infrastructure.eventstore.recorder import EVENTS_TABLE
from infrastructure.runtime.settings import Settings

SEEDED_FROM = datetime(2025, 1, 1, tzinfo=UTC)
KEY, ENTITY = "note", "contact"
TENANTS = ("tenant-a", "tenant-b")
GOAL = 0.7
# tidings' tables each row reads or writes (PostgreSQL: analyzed before the timed part).
VALUE_TABLES = (EVENTS_TABLE, "cf_value_clock", "cf_entity_values", "cf_definitions", "feed_items")
BODY_TABLES = (EVENTS_TABLE, "mail_messages", BODY_KEYS_TABLE, "feed_items")


class FixedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


def _ok(result: Any) -> Any:
    if not result.is_success:
        raise RuntimeError(f"seeding write failed: {result.error}")
    return result.data


def bench_values(backend: Backend, values: int, batch_size: int) -> Row:
    with scratch_database(backend, "retention") as scratch:
        app = bootstrap(database_url=scratch.url, project_inline=False)
        try:
            generations = {}
            for tenant in TENANTS:
                field = {"type": "text"}
                retention = {"keepFor": "30d", "action": "delete"}
                payload = {"entityName": ENTITY, "fieldKey": KEY, "field": field}
                _ok(
                    app.write(
                        "define-tenant-field", {**payload, "retention": retention}, admin_of(tenant)
                    )
                )
                generations[tenant] = 1
            say(f"[{backend}] values: seeding {values:,} values")
            seeder = ValueSeeder(app.ctx.store, chunk=500, start=SEEDED_FROM, ctx=app.ctx)
            rng = random.Random(16)
            for i in range(values):
                tenant = TENANTS[i % len(TENANTS)]
                seeder.set(
                    tenant, ENTITY, f"e{i:08d}", KEY, generations[tenant], sample_value("text", rng)
                )
            seeder.flush()
            caught = timed(app.projections.catch_up)
            say(f"[{backend}] caught up {seeder.appended:,} value events in {caught:.1f}s")
            # Every value was set within ``values`` ms of SEEDED_FROM: all due 31 days on.
            now = SEEDED_FROM + timedelta(milliseconds=values) + timedelta(days=31)
            app.ctx = dataclasses.replace(app.ctx, clock=FixedClock(now))
            copies = ["bench_retention_a", "bench_retention_b"]
            for copy in copies:
                _copy_tables(scratch, copy)
            sweeper = wiring.retention_sweeper(
                app, Settings(database_url=scratch.url, retention_batch_size=batch_size)
            )
            recorded: list[int] = []

            def ours() -> None:
                recorded.append(_sweep_and_catch_up(app, sweeper, backend))

            # tidings' tables get the statistics the baseline's copies get: with
            # autovacuum off and none, PostgreSQL plans ``load_many`` as a merge join
            # along the whole log's index, a batch's cost growing with the log.
            settle(scratch, vacuum=VALUE_TABLES)
            say(f"[{backend}] values: baseline, tidings, baseline")
            tidings_s, raw_s = sandwich(
                ours,
                lambda: _raw_sweep(scratch, copies.pop(0), now),
                between=lambda: settle(scratch),
            )
            _check_swept(scratch, recorded, values)
        finally:
            app.close()
    ratio = raw_s / tidings_s  # rates: values/s of tidings over the baseline's
    return Row(
        f"sweep {values:,} expired values (values/s)",
        backend,
        f"{values / tidings_s:,.0f}",
        f"{values / raw_s:,.0f}",
        ratio,
        f">= {GOAL}x",
        ratio >= GOAL,
    )


def _copy_tables(scratch: Scratch, copy: str) -> None:
    """Copies of the values and the value clock, same shape and keys, for the baseline."""
    pg = scratch.backend == "postgresql"
    conn = raw_connection(scratch)
    try:
        for table, source, key in (
            (f"{copy}_values", "cf_entity_values", "tenant_id, entity_name, entity_id"),
            (
                f"{copy}_clock",
                "cf_value_clock",
                "definition_id, generation, tenant_id, entity_name, entity_id, field_key",
            ),
        ):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"CREATE TABLE {table} AS SELECT * FROM {source} WHERE 1 = 0")
            if pg:
                conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY ({key})")
            else:  # SQLite: CREATE TABLE AS keeps no key; make it as the source is
                conn.execute(f"DROP TABLE {table}")
                row = conn.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (source,)
                ).fetchone()
                conn.execute(str(row[0]).replace(source, table, 1))
            conn.execute(f"INSERT INTO {table} SELECT * FROM {source}")
            if pg:
                conn.execute(f"VACUUM ANALYZE {table}")
    finally:
        conn.close()


def _raw_sweep(scratch: Scratch, copy: str, now: datetime) -> None:
    """The hand-written sweep: every due value's key removed, its clock row deleted."""
    cutoff = _micros(now - timedelta(days=30))
    values, clock = f"{copy}_values", f"{copy}_clock"
    due = (
        f"SELECT tenant_id, entity_name, entity_id FROM {clock}"
        " WHERE field_key = {p} AND set_at <= {p}"
    )
    conn = raw_connection(scratch)
    try:
        if scratch.backend == "postgresql":
            with conn.transaction():
                conn.execute(
                    f"UPDATE {values} SET fields = fields - %s::text"
                    f" WHERE (tenant_id, entity_name, entity_id) IN ({due.format(p='%s')})",
                    (KEY, KEY, cutoff),
                )
                conn.execute(
                    f"DELETE FROM {clock} WHERE field_key = %s AND set_at <= %s", (KEY, cutoff)
                )
        else:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                f"UPDATE {values} SET fields = json_remove(fields, ?)"
                f" WHERE (tenant_id, entity_name, entity_id) IN ({due.format(p='?')})",
                (f'$."{KEY}"', KEY, cutoff),
            )
            conn.execute(f"DELETE FROM {clock} WHERE field_key = ? AND set_at <= ?", (KEY, cutoff))
            conn.execute("COMMIT")
    finally:
        conn.close()


def _check_swept(scratch: Scratch, recorded: list[int], values: int) -> None:
    """Both sides left no value and no clock row, and tidings recorded each expiry once."""
    if recorded != [values]:
        raise RuntimeError(f"tidings recorded {recorded} expiries, expected {values}")
    conn = raw_connection(scratch)
    try:
        for table in ("cf_value_clock", "bench_retention_a_clock", "bench_retention_b_clock"):
            left = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            if left:
                raise RuntimeError(f"{table} still holds {left} rows")
        pg = scratch.backend == "postgresql"
        holds = f"jsonb_exists(fields, '{KEY}')" if pg else f"json_type(fields, '$.\"{KEY}\"')"
        for table in ("cf_entity_values", "bench_retention_a_values", "bench_retention_b_values"):
            left = conn.execute(
                f"SELECT count(*) FROM {table} WHERE {holds} IS NOT NULL"
                if not pg
                else f"SELECT count(*) FROM {table} WHERE {holds}"
            ).fetchone()[0]
            if left:
                raise RuntimeError(f"{table} still holds {left} values")
    finally:
        conn.close()


class _WithBodies:
    """The store ``MailSeeder`` appends to: each chunk's messages get a real sealed body,
    stored as one pack, before they are appended."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def append(self, events: list[DomainEvent]) -> None:
        messages = [e for e in events if isinstance(e, MessageIngested)]
        refs = self.app.ctx.mail.blobs.put_packed(
            [(BlobOwner(m.tenant_id, m.account_id), _raw(m.provider_message_id)) for m in messages]
        )
        with_refs = dict(zip((id(m) for m in messages), refs, strict=True))
        self.app.ctx.store.append(
            [
                dataclasses.replace(e, body_ref=with_refs[id(e)])
                if isinstance(e, MessageIngested)
                else e
                for e in events
            ]
        )


class _SeedingApp:
    """What ``MailSeeder`` reads of an app: the cipher, and a store that adds bodies."""

    def __init__(self, app: Any) -> None:
        self.ctx = dataclasses.replace(app.ctx, store=_WithBodies(app))


def _raw(provider_id: str) -> bytes:
    return (
        f"Message-ID: <{provider_id}@bench.example>\r\nSubject: bench\r\n\r\n"
        + "A body of an ordinary length, kept until its tenant's bodiesFor.\r\n" * 30
    ).encode()


def bench_bodies(backend: Backend, bodies: int, batch_size: int) -> Row:
    with scratch_database(backend, "retention") as scratch:
        app = bootstrap(
            database_url=scratch.url,
            project_inline=False,
            blob_dir=scratch.workdir / "blobs",
            mail_retention_bodies_for="30d",
        )
        try:
            say(f"[{backend}] bodies: seeding {bodies:,} messages with their bodies")
            seeder = MailSeeder(_SeedingApp(app))
            seeder.seed(bodies + len(seeder.accounts))
            caught = timed(app.projections.catch_up)
            say(f"[{backend}] caught up {seeder.appended:,} mail events in {caught:.1f}s")
            now = seeder.now + timedelta(days=31)
            app.ctx = dataclasses.replace(app.ctx, clock=FixedClock(now))
            copies = ["bench_bodies_a", "bench_bodies_b"]
            for copy in copies:
                _copy_messages(scratch, copy)
            sweeper = wiring.retention_sweeper(
                app, Settings(database_url=scratch.url, retention_batch_size=batch_size)
            )
            recorded: list[int] = []

            def ours() -> None:
                recorded.append(_sweep_and_catch_up(app, sweeper, backend))

            blobs = app.ctx.mail.blobs
            settle(scratch, vacuum=BODY_TABLES)  # statistics, as the copies have
            say(f"[{backend}] bodies: baseline, tidings, baseline")
            tidings_s, raw_s = sandwich(
                ours,
                lambda: _raw_erase(scratch, copies.pop(0), blobs, now),
                between=lambda: settle(scratch),
            )
            if recorded != [bodies]:
                raise RuntimeError(f"tidings erased {recorded} bodies, expected {bodies}")
            for table in ("mail_messages", "bench_bodies_a", "bench_bodies_b"):
                left = _count_bodies(scratch, table)
                if left:
                    raise RuntimeError(f"{table} still holds {left} bodies")
        finally:
            app.close()
    ratio = raw_s / tidings_s
    return Row(
        f"erase {bodies:,} expired bodies (bodies/s)",
        backend,
        f"{bodies / tidings_s:,.0f}",
        f"{bodies / raw_s:,.0f}",
        ratio,
        f">= {GOAL}x",
        ratio >= GOAL,
    )


def _copy_messages(scratch: Scratch, copy: str) -> None:
    conn = raw_connection(scratch)
    try:
        conn.execute(f"DROP TABLE IF EXISTS {copy}")
        conn.execute(f"CREATE TABLE {copy} AS SELECT * FROM mail_messages")
        conn.execute(f"CREATE INDEX {copy}_due ON {copy} (tenant_id, received_at, message_id)")
        keys = f"{copy}_keys"  # the bodies' own keys, which an erasure deletes
        conn.execute(f"DROP TABLE IF EXISTS {keys}")
        conn.execute(f"CREATE TABLE {keys} (key_id TEXT PRIMARY KEY, wrapped TEXT NOT NULL)")
        conn.execute(f"INSERT INTO {keys} SELECT key_id, wrapped FROM {BODY_KEYS_TABLE}")
        if scratch.backend == "postgresql":
            conn.execute(f"ALTER TABLE {copy} ADD PRIMARY KEY (message_id)")
            conn.execute(f"VACUUM ANALYZE {copy}")
            conn.execute(f"VACUUM ANALYZE {keys}")
    finally:
        conn.close()


def _key_ids(refs: list[str]) -> list[tuple[str]]:
    keyed = [KeyedRef.of(ref) for ref in refs]
    return [
        (body_key_id(k.owner.tenant_id, k.owner.account_id, k.name),)
        for k in keyed
        if k is not None
    ]


def _raw_erase(scratch: Scratch, copy: str, blobs: Any, now: datetime) -> None:
    """The hand-written erasure: one UPDATE of every due row and one batched DELETE of
    their bodies' keys, then the bytes of each ref overwritten in its pack, one open and
    one fsync per pack file."""
    cutoff = (now - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    due = "received_at <= {p} AND body_erased = 0 AND body_ref IS NOT NULL"
    conn = raw_connection(scratch)
    try:
        if scratch.backend == "postgresql":
            with conn.transaction():
                refs = [
                    row[0]
                    for row in conn.execute(
                        f"UPDATE {copy} AS m SET body_ref = NULL, snippet = '', body_erased = 1"
                        f" FROM {copy} AS o WHERE o.message_id = m.message_id"
                        f" AND o.{due.format(p='%s').replace(' AND ', ' AND o.')}"
                        " RETURNING o.body_ref",
                        (cutoff,),
                    ).fetchall()
                ]
                with conn.cursor() as cur:
                    cur.executemany(f"DELETE FROM {copy}_keys WHERE key_id = %s", _key_ids(refs))
        else:
            conn.execute("BEGIN IMMEDIATE")
            refs = [
                row[0]
                for row in conn.execute(
                    f"SELECT body_ref FROM {copy} WHERE {due.format(p='?')}", (cutoff,)
                ).fetchall()
            ]
            conn.execute(
                f"UPDATE {copy} SET body_ref = NULL, snippet = '', body_erased = 1"
                f" WHERE {due.format(p='?')}",
                (cutoff,),
            )
            conn.executemany(f"DELETE FROM {copy}_keys WHERE key_id = ?", _key_ids(refs))
            conn.execute("COMMIT")
    finally:
        conn.close()
    packs: dict[Path, list[tuple[int, int]]] = {}
    for ref in refs:
        *_, offset, length = ref.split(":")
        packs.setdefault(blobs.path_of(ref), []).append((int(offset), int(length)))
    for path, members in packs.items():
        with open(path, "r+b") as f:
            for offset, length in members:
                f.seek(offset)
                f.write(bytes(length))
            f.flush()
            os.fsync(f.fileno())


def _count_bodies(scratch: Scratch, table: str) -> int:
    conn = raw_connection(scratch)
    try:
        row = conn.execute(f"SELECT count(*) FROM {table} WHERE body_ref IS NOT NULL").fetchone()
        return int(row[0])
    finally:
        conn.close()


def _micros(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _sweep_and_catch_up(app: Any, sweeper: Any, backend: str) -> int:
    """tidings' side of a row: one whole sweep, then the read models caught up; the
    expiries it recorded."""
    started = time.perf_counter()
    report = sweeper.run()
    if report is None or report.interrupted:
        raise RuntimeError("the sweep did not run to its end")
    swept = time.perf_counter()
    app.projections.catch_up()
    say(
        f"[{backend}] tidings: sweep {swept - started:.2f}s"
        f" ({report.batches} batches), catch-up {time.perf_counter() - swept:.2f}s"
    )
    return int(report.recorded)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--values", type=int, default=1_000_000, help="expired values swept")
    parser.add_argument("--bodies", type=int, default=100_000, help="expired bodies erased")
    parser.add_argument(
        "--batch-size", type=int, default=1000, help="the sweeper's batch (1000, the default)"
    )
    args = parser.parse_args(argv)
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    rows = [bench_values(backend, args.values, args.batch_size) for backend in backends]
    rows += [bench_bodies(backend, args.bodies, args.batch_size) for backend in backends]
    elapsed = time.perf_counter() - started
    render(
        "tidings retention sweeper vs a hand-written set-based statement (same run)",
        rows,
        environment(backends),
        notes=[
            f"values: RetentionSweeper.run() in batches of {args.batch_size:,} (one clock "
            "statement with the streams' versions, one append of CustomFieldValueExpired "
            "each; load_many only for a batch whose streams moved), then "
            "catch_up() of the read models (values, clock, feed); baseline: one UPDATE "
            "removing the key where the clock row is due and one DELETE of those rows, one "
            "transaction, on copies of the same tables (no events, no feed); baseline, "
            "tidings, baseline, the baseline's mean.",
            "bodies: RetentionSweeper.run() (the mail_bodies kind: one statement along its "
            "partial index, one load_many, the bodies' keys and blobs destroyed, one append "
            "of MessageBodyErased each batch), then catch_up(); baseline: one UPDATE of "
            "every due row of a copy of mail_messages and one batched DELETE of their keys "
            "from a copy of message_keys, then each ref's bytes overwritten in its pack, one "
            "open and one fsync per pack file; baseline, tidings, baseline.",
            f"total wall time {elapsed:.0f}s; exit status 1 when a goal is missed",
        ],
    )
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
