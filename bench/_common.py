"""Shared helpers of the benchmarks: throw-away databases, raw connections, a seeder that
writes events fast, timing, and the rich report.

Every benchmark measures tidings and its baseline side by side in one run, on the same
backend and the same machine, and reports a ratio against a goal.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import psycopg
from rich.console import Console
from rich.table import Table

from application.custom_fields.sealing import seal_value
from application.users import User
from domain.custom_field_values import (
    CustomFieldValueCleared,
    CustomFieldValueSet,
    entity_stream_id,
)
from domain.events import DomainEvent
from domain.field_definition import definition_id
from infrastructure.sql.database import DatabaseUrl

Backend = Literal["sqlite", "postgresql"]
BACKENDS: tuple[Backend, ...] = ("sqlite", "postgresql")

PG_DSN = os.environ.get("TIDINGS_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")

console = Console(stderr=True, log_path=False)


def say(message: str) -> None:
    """Progress on stderr, so stdout holds only the report."""
    console.log(message)


# --- throw-away databases ---------------------------------------------------------------


@dataclass(frozen=True)
class Scratch:
    """One fresh database: a SQLite file in a temp dir, or a fresh PostgreSQL schema."""

    backend: Backend
    url: str
    workdir: Path  # a temp dir for side files (always present, removed afterwards)
    schema: str | None = None

    @property
    def parsed(self) -> DatabaseUrl:
        return DatabaseUrl.parse(self.url)


def _pg_admin() -> psycopg.Connection[Any]:
    return psycopg.connect(PG_DSN.split("?")[0], autocommit=True)


@contextlib.contextmanager
def scratch_database(backend: Backend, label: str = "bench") -> Iterator[Scratch]:
    workdir = Path(tempfile.mkdtemp(prefix=f"tidings-{label}-"))
    schema = None
    try:
        if backend == "sqlite":
            yield Scratch(backend, f"sqlite:///{workdir / 'tidings.db'}", workdir)
        else:
            schema = f"bench_{label}_{uuid.uuid4().hex[:8]}"
            yield Scratch(backend, f"{PG_DSN}?schema={schema}", workdir, schema)
    finally:
        if schema is not None:
            with _pg_admin() as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        shutil.rmtree(workdir, ignore_errors=True)


def raw_connection(scratch: Scratch) -> Any:
    """A plain DB-API connection of our own, outside tidings: autocommit, transactions by
    hand. SQLite gets the same WAL/synchronous settings as tidings' read-model database;
    PostgreSQL uses ``%s`` placeholders and the scratch schema on its search path."""
    url = scratch.parsed
    if url.dialect == "sqlite":
        assert url.sqlite_path is not None
        conn = sqlite3.connect(url.sqlite_path, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn
    return psycopg.connect(url.conninfo, autocommit=True)


def settle(scratch: Scratch, vacuum: Sequence[str] = ()) -> None:
    """Before a timed section: flush pending writes (checkpoint), so one side does not pay
    for the other's; on PostgreSQL, ``VACUUM ANALYZE`` the given tables, so the first
    reader does not pay for setting hint bits on freshly written rows (autovacuum may be
    off)."""
    if scratch.backend == "sqlite":
        conn = raw_connection(scratch)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        return
    conn = raw_connection(scratch)
    try:
        for table in vacuum:
            conn.execute(f"VACUUM ANALYZE {table}")
    finally:
        conn.close()
    with _pg_admin() as admin:
        admin.execute("CHECKPOINT")


def sandwich(
    ours: Callable[[], Any], theirs: Callable[[], Any], between: Callable[[], Any] = lambda: None
) -> tuple[float, float]:
    """Time baseline, tidings, baseline again; the baseline's figure is the mean of its two
    runs, so a drift in machine load (other processes) does not favour either side."""
    between()
    first = timed(theirs)
    between()
    mine = timed(ours)
    between()
    second = timed(theirs)
    return mine, (first + second) / 2


def alternating(
    ours: Callable[[], Any],
    theirs: Callable[[], Any],
    rounds: int = 2,
    between: Callable[[], Any] = lambda: None,
) -> tuple[float, float]:
    """Time baseline, tidings, baseline, tidings, ..., baseline (``rounds`` runs of ours,
    one more of theirs) and keep each side's best: on a shared machine a burst of load
    from other processes slows whichever run it hits, and the best run is the one it hit
    least. Both sides get the same treatment."""
    mine: list[float] = []
    base: list[float] = []
    for _ in range(rounds):
        between()
        base.append(timed(theirs))
        between()
        mine.append(timed(ours))
    between()
    base.append(timed(theirs))
    return min(mine), min(base)


# --- timing -------------------------------------------------------------------------------


class Stopwatch:
    def __init__(self) -> None:
        self.seconds = 0.0

    @contextlib.contextmanager
    def running(self) -> Iterator[Stopwatch]:
        start = time.perf_counter()
        try:
            yield self
        finally:
            self.seconds += time.perf_counter() - start


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, q in (0, 100]."""
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


# --- seeding ------------------------------------------------------------------------------

ADMIN_ROLES = frozenset({"TenantAdmin"})


def admin_of(tenant: str) -> User:
    return User(id=f"admin-{tenant}", tenant_id=tenant, roles=ADMIN_ROLES)


class ValueSeeder:
    """Builds value events directly (no load, no validation) with correct stream versions,
    and appends them through the store in chunks: the fast path to a big event log.

    Definitions are written through ``app.write`` (few, and correct by construction); the
    seeder only needs each key's current generation, which the caller passes in.
    """

    def __init__(
        self, store: Any, chunk: int = 500, start: datetime | None = None, ctx: Any = None
    ) -> None:
        self.store = store
        self.ctx = ctx  # an app's Context: values are sealed as set-custom-field seals them
        self.chunk = chunk
        self.versions: dict[uuid.UUID, int] = {}
        self.held: dict[uuid.UUID, set[str]] = {}
        self.pending: list[DomainEvent] = []
        self.appended = 0
        self._streams: dict[tuple[str, str, str], uuid.UUID] = {}
        self._definitions: dict[tuple[str, str, str], str] = {}
        self._now = start or datetime(2025, 1, 1, tzinfo=UTC)

    def _next(self, stream: uuid.UUID) -> tuple[int, datetime]:
        version = self.versions.get(stream, 0) + 1
        self.versions[stream] = version
        self._now += timedelta(milliseconds=1)
        return version, self._now

    def _stream(self, tenant: str, entity: str, entity_id: str) -> uuid.UUID:
        name = (tenant, entity, entity_id)
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = entity_stream_id(*name)
        return stream

    def _definition(self, owner: str, entity: str, key: str) -> str:
        name = (owner, entity, key)
        found = self._definitions.get(name)
        if found is None:
            found = self._definitions[name] = str(definition_id(*name))
        return found

    def set(
        self,
        tenant: str,
        entity: str,
        entity_id: str,
        key: str,
        generation: int,
        value: Any,
        owner: str | None = None,
    ) -> None:
        stream = self._stream(tenant, entity, entity_id)
        version, now = self._next(stream)
        self.held.setdefault(stream, set()).add(key)
        self._push(
            CustomFieldValueSet(
                originator_id=stream,
                originator_version=version,
                timestamp=now,
                tenant_id=tenant,
                entity_name=entity,
                entity_id=entity_id,
                field_key=key,
                definition_id=self._definition(owner or tenant, entity, key),
                generation=generation,
                **self._sealed(tenant, entity, entity_id, key, value),
            )
        )

    def _sealed(
        self, tenant: str, entity: str, entity_id: str, key: str, value: Any
    ) -> dict[str, str]:
        if self.ctx is None:
            raise ValueError("ValueSeeder needs the app's ctx to seal values")
        sealed, digest = seal_value(
            self.ctx, tenant, entity_name=entity, entity_id=entity_id, field_key=key, value=value
        )
        return {"sealed": sealed, "digest": digest}

    def clear(
        self,
        tenant: str,
        entity: str,
        entity_id: str,
        key: str,
        generation: int,
        owner: str | None = None,
    ) -> bool:
        """Clear a held value (like the aggregate, no event when there is none)."""
        stream = self._stream(tenant, entity, entity_id)
        if key not in self.held.get(stream, ()):
            return False
        self.held[stream].discard(key)
        version, now = self._next(stream)
        self._push(
            CustomFieldValueCleared(
                originator_id=stream,
                originator_version=version,
                timestamp=now,
                tenant_id=tenant,
                entity_name=entity,
                entity_id=entity_id,
                field_key=key,
                definition_id=self._definition(owner or tenant, entity, key),
                generation=generation,
            )
        )
        return True

    def _push(self, event: DomainEvent) -> None:
        self.pending.append(event)
        if len(self.pending) >= self.chunk:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.store.append(self.pending)
            self.appended += len(self.pending)
            self.pending = []


def sample_value(field_type: str, rng: random.Random) -> Any:
    if field_type == "number":
        return rng.randint(0, 1_000_000)
    if field_type == "boolean":
        return rng.random() < 0.5
    if field_type == "enum":
        return rng.choice(["gold", "silver", "bronze"])
    return f"value-{rng.randint(0, 10**9):x}"


def field_spec(field_type: str) -> dict[str, Any]:
    if field_type == "enum":
        return {"type": "enum", "options": ["gold", "silver", "bronze"]}
    return {"type": field_type}


# --- report -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    measurement: str
    backend: str
    tidings: str
    baseline: str
    ratio: float
    goal: str
    passed: bool


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown cpu"


def _memory() -> str:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB RAM"
    return "? RAM"


def _postgres_version() -> str:
    try:
        with _pg_admin() as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return str(row[0]) if row else "?"
    except psycopg.Error:
        return "unreachable"


def environment(backends: Sequence[Backend]) -> list[str]:
    lines = [
        f"machine: {os.cpu_count()} cores ({_cpu_model()}), {_memory()}, "
        f"{platform.system()} {platform.release()}",
        f"python {platform.python_version()}, eventsourcing {_version('eventsourcing')}, "
        f"psycopg {_version('psycopg')}, pydantic {_version('pydantic')}, "
        f"rich {_version('rich')}",
    ]
    dbs = []
    if "sqlite" in backends:
        dbs.append(f"SQLite {sqlite3.sqlite_version}")
    if "postgresql" in backends:
        dbs.append(f"PostgreSQL {_postgres_version()} at {PG_DSN.split('@')[-1]}")
    lines.append("databases: " + ", ".join(dbs))
    return lines


def render(
    title: str, rows: Sequence[Row], header: Sequence[str], notes: Sequence[str] = ()
) -> None:
    out = Console(width=max(120, Console().width))
    for line in header:
        out.print(line, highlight=False)
    table = Table(title=title, title_justify="left", show_lines=False)
    for column, justify in (
        ("measurement", "left"),
        ("backend", "left"),
        ("tidings", "right"),
        ("baseline", "right"),
        ("ratio", "right"),
        ("goal", "left"),
        ("result", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        verdict = "[green]PASS[/]" if row.passed else "[red]FAIL[/]"
        table.add_row(
            row.measurement,
            row.backend,
            row.tidings,
            row.baseline,
            f"{row.ratio:.2f}",
            row.goal,
            verdict,
        )
    out.print(table)
    for note in notes:
        out.print(note, highlight=False)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
