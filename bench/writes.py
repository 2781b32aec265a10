"""Write throughput under concurrency: ``set-custom-field`` from 1, 4 and 16 threads of one
app and from 4 processes of 4 threads each (an app each), against eventsourcing's
``Application.save()`` of one event per command with the same concurrency, in the same
run, on SQLite and PostgreSQL.

    python bench/writes.py [--backend sqlite|postgresql|both] [--seconds S]
                           [--defines N] [--quick]

tidings runs with each backend's defaults (SQLite: the read models caught up inline
after every write; PostgreSQL: not inline). Each call writes a value on a new entity (so
the write cache helps only with the definition); each baseline call saves a new
aggregate. Each level runs baseline, tidings, baseline for S seconds each; the
baseline's throughput is the mean of its two runs. Goals: at 16 threads >= 10x the
baseline's throughput on PostgreSQL and >= 5x on SQLite, with tidings' p99 <= 25 ms;
tidings' throughput grows from 1 to 16 threads. On SQLite one more row: 16 threads of an
app that does not catch up inline (what the inline catch-ups cost). The progress lines on
stderr give each run's CPU time per operation in this process (threads only). Then
``define-tenant-field`` against a bare save, as in ``bench/projections.py`` (median <= 2x).

``--grow N`` instead writes N new entities from 16 threads into one store and reports the
rate of each tenth of them: a cost that grows with the store shows as a last tenth slower
than the early ones (goal: the last tenth >= 0.9 of the fastest tenth of the first half;
the first tenth also warms the caches and the pool).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import (
    BACKENDS,
    Backend,
    Row,
    Scratch,
    admin_of,
    environment,
    percentile,
    render,
    say,
    scratch_database,
    settle,
)
from bench.projections import BenchApp, Counter, _eventsourcing_env, bench_define
from infrastructure.bootstrap import bootstrap

THREADS = (1, 4, 16)
PROCESSES = 4
THREADS_PER_PROCESS = 4
TENANT = "tenant-writes"


@dataclass(frozen=True)
class Run:
    """One side's run at one concurrency: operations per second and latencies (s)."""

    throughput: float
    latencies: list[float]
    cpu: float | None = None  # this process's CPU seconds per operation (threads only)

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


def _tidings_app(scratch: Scratch) -> Any:
    return bootstrap(database_url=scratch.url, blob_dir=scratch.workdir / "blobs")


def _tidings_op(app: Any, caller: str) -> Callable[[int], None]:
    user = admin_of(TENANT)
    entity = itertools.count()

    def op(i: int) -> None:
        payload = {
            "entityName": "contact",
            "entityId": f"{caller}-{next(entity)}",
            "fieldKey": "note",
            "value": f"value {i}",
        }
        result = app.write("set-custom-field", payload, user)
        if not result.is_success:
            raise RuntimeError(f"set-custom-field failed: {result.error}")

    return op


def _baseline_op(es_app: Any) -> Callable[[int], None]:
    def op(_: int) -> None:
        es_app.save(Counter())

    return op


def _loop(op: Callable[[int], None], start: float, stop: float) -> list[float]:
    """Run ``op`` from ``start`` until ``stop`` (perf_counter times); its latencies."""
    while time.perf_counter() < start:
        time.sleep(0.001)
    latencies: list[float] = []
    i = 0
    while True:
        began = time.perf_counter()
        if began >= stop:
            return latencies
        op(i)
        latencies.append(time.perf_counter() - began)
        i += 1


def _threads(ops: list[Callable[[int], None]], seconds: float) -> Run:
    results: list[list[float]] = [[] for _ in ops]
    start = time.perf_counter() + 0.2
    stop = start + seconds

    def work(n: int) -> None:
        results[n] = _loop(ops[n], start, stop)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(ops))]
    cpu = time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cpu = time.process_time() - cpu
    latencies = [x for r in results for x in r]
    return Run(len(latencies) / seconds, latencies, cpu / max(len(latencies), 1))


def _process_main(
    side: str, url: str, workdir: str, caller: str, seconds: float, out: Any, go: Any
) -> None:
    backend: Backend = "sqlite" if url.startswith("sqlite") else "postgresql"
    scratch = Scratch(backend, url, Path(workdir))
    app = _tidings_app(scratch) if side == "tidings" else BenchApp(env=_eventsourcing_env(scratch))
    try:
        ops = [
            _tidings_op(app, f"{caller}-{k}") if side == "tidings" else _baseline_op(app)
            for k in range(THREADS_PER_PROCESS)
        ]
        ops[0](0)  # a warm connection and definition, like the threads' long-lived app
        out.put(("ready", None))
        go.wait(120)
        out.put(("done", _threads(ops, seconds).latencies))
    finally:
        app.close()


def _processes(side: str, scratch: Scratch, seconds: float) -> Run:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    go = ctx.Event()
    procs = [
        ctx.Process(
            target=_process_main,
            args=(side, scratch.url, str(scratch.workdir), f"p{n}", seconds, out, go),
        )
        for n in range(PROCESSES)
    ]
    try:
        for proc in procs:  # one at a time: concurrent CREATE TABLE IF NOT EXISTS can fail
            proc.start()
            out.get(timeout=120)  # ready
        go.set()
        latencies: list[float] = []
        for _ in procs:
            _, value = out.get(timeout=120)
            latencies += value
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    return Run(len(latencies) / seconds, latencies)


def bench_level(
    backend: Backend, scratch: Scratch, app: Any, es_app: Any, level: str, seconds: float
) -> tuple[Run, Run]:
    """baseline, tidings, baseline at one concurrency level; the baseline's mean."""
    if level == "processes":

        def ours() -> Run:
            return _processes("tidings", scratch, seconds)

        def theirs() -> Run:
            return _processes("baseline", scratch, seconds)

    else:
        n = int(level)

        def ours() -> Run:
            return _threads([_tidings_op(app, f"t{level}-{k}") for k in range(n)], seconds)

        def theirs() -> Run:
            return _threads([_baseline_op(es_app) for _ in range(n)], seconds)

    settle(scratch)
    first = theirs()
    settle(scratch)
    mine = ours()
    settle(scratch)
    second = theirs()
    baseline = Run((first.throughput + second.throughput) / 2, first.latencies + second.latencies)
    say(
        f"[{backend}] {level}: tidings {mine.throughput:,.0f}/s (p50 {mine.p50 * 1e3:.1f} ms,"
        f" p99 {mine.p99 * 1e3:.1f} ms, CPU/op {_ms(mine.cpu)}), save()"
        f" {baseline.throughput:,.0f}/s (CPU/op {_ms(first.cpu)})"
    )
    return mine, baseline


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def _row(label: str, backend: Backend, mine: Run, base: Run, goal: str, passed: bool) -> Row:
    return Row(
        f"set-custom-field/s, {label} (p50 / p99 ms)",
        backend,
        f"{mine.throughput:,.0f} ({mine.p50 * 1e3:.1f} / {mine.p99 * 1e3:.1f})",
        f"{base.throughput:,.0f} ({base.p50 * 1e3:.1f} / {base.p99 * 1e3:.1f})",
        mine.throughput / base.throughput,
        goal,
        passed,
    )


def bench_backend(backend: Backend, seconds: float) -> list[Row]:
    rows: list[Row] = []
    with scratch_database(backend, "writes") as scratch:
        app = _tidings_app(scratch)
        es_app = BenchApp(env=_eventsourcing_env(scratch))
        try:
            _define(app)
            goal = 10.0 if backend == "postgresql" else 5.0
            by_level: dict[str, Run] = {}
            for level in [*(str(n) for n in THREADS), "processes"]:
                mine, base = bench_level(backend, scratch, app, es_app, level, seconds)
                by_level[level] = mine
                ratio = mine.throughput / base.throughput
                label = (
                    f"{level} threads"
                    if level != "processes"
                    else f"{PROCESSES} processes x {THREADS_PER_PROCESS} threads"
                )
                top = level == str(THREADS[-1])
                passed = ratio >= goal and mine.p99 <= 0.025 if top else True
                target = f">= {goal:.0f}x, p99 <= 25 ms" if top else "-"
                rows.append(_row(label, backend, mine, base, target, passed))
            grows = by_level[str(THREADS[-1])].throughput / by_level[str(THREADS[0])].throughput
            rows.append(
                Row(
                    f"set-custom-field/s, {THREADS[-1]} threads / 1 thread",
                    backend,
                    f"{by_level[str(THREADS[-1])].throughput:,.0f}",
                    f"{by_level[str(THREADS[0])].throughput:,.0f}",
                    grows,
                    "> 1x",
                    grows > 1.0,
                )
            )
            # The same number of writers in 4 processes as in one: past one process's
            # interpreter lock, on PostgreSQL; on SQLite the processes share one writer.
            scale = by_level["processes"].throughput / by_level[str(THREADS[-1])].throughput
            rows.append(
                Row(
                    f"set-custom-field/s, {PROCESSES} processes x {THREADS_PER_PROCESS} threads"
                    f" / 1 process x {THREADS[-1]} threads",
                    backend,
                    f"{by_level['processes'].throughput:,.0f}",
                    f"{by_level[str(THREADS[-1])].throughput:,.0f}",
                    scale,
                    "> 1x" if backend == "postgresql" else "-",
                    scale > 1.0 if backend == "postgresql" else True,
                )
            )
            if backend == "sqlite":  # what the inline catch-ups cost: the same, without them
                rows.append(_not_inline(scratch, es_app, seconds))
        finally:
            es_app.close()
            app.close()
    return rows


def _not_inline(scratch: Scratch, es_app: Any, seconds: float) -> Row:
    app = bootstrap(
        database_url=scratch.url, blob_dir=scratch.workdir / "blobs", project_inline=False
    )
    try:
        level = str(THREADS[-1])
        mine, base = bench_level("sqlite", scratch, app, es_app, level, seconds)
    finally:
        app.close()
    return _row(f"{level} threads, read models not inline", "sqlite", mine, base, "-", True)


def bench_grow(backend: Backend, total: int) -> Row:
    """``total`` new entities from 16 threads into one store; the last tenth's rate
    against the fastest of the first five."""
    per = max(total // 10, 1)
    rates: list[float] = []
    with scratch_database(backend, "grow") as scratch:
        app = _tidings_app(scratch)
        try:
            _define(app)
            ops = [_tidings_op(app, f"g{k}") for k in range(THREADS[-1])]
            for tenth in range(10):
                ticket = itertools.count()

                def work(op: Callable[[int], None], ticket: Iterator[int] = ticket) -> None:
                    while next(ticket) < per:
                        op(0)

                threads = [threading.Thread(target=work, args=(op,)) for op in ops]
                began = time.perf_counter()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                rates.append(per / (time.perf_counter() - began))
                say(
                    f"[{backend}] grow: {(tenth + 1) * per:,} entities, this tenth"
                    f" {rates[-1]:,.0f}/s (load {os.getloadavg()[0]:.1f})"
                )
        finally:
            app.close()
    early = max(rates[:5])
    ratio = rates[-1] / early
    return Row(
        f"set-custom-field/s, {total:,} new entities, {THREADS[-1]} threads: last tenth"
        " (slowest) / fastest of the first five",
        backend,
        f"{rates[-1]:,.0f} ({min(rates):,.0f})",
        f"{early:,.0f}",
        ratio,
        ">= 0.9",
        ratio >= 0.9,
    )


def _define(app: Any) -> None:
    defined = app.write(
        "define-tenant-field",
        {"entityName": "contact", "fieldKey": "note", "field": {"type": "text"}},
        admin_of(TENANT),
    )
    if not defined.is_success:
        raise RuntimeError(f"define failed: {defined.error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--seconds", type=float, help="seconds per run (5; quick 2)")
    parser.add_argument("--defines", type=int, help="timed defines (300; quick 100)")
    parser.add_argument("--quick", action="store_true", help="shorter runs, for a smoke run")
    parser.add_argument("--grow", type=int, help="write N new entities; the rate per tenth")
    args = parser.parse_args(argv)
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    defines = args.defines or (100 if args.quick else 300)
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    rows: list[Row] = []
    for backend in backends:
        if args.grow:
            rows.append(bench_grow(backend, args.grow))
            continue
        rows += bench_backend(backend, seconds)
        rows.append(bench_define(backend, defines))
    elapsed = time.perf_counter() - started
    render(
        "tidings writes vs eventsourcing Application.save() (same run, same machine)",
        rows,
        environment(backends),
        notes=[
            "set-custom-field: app.write with the backend's defaults (SQLite: read models "
            "caught up inline), each call on a new entity. "
            "Baseline: Application.save() of a new aggregate (one event) per call. "
            f"Runs of {seconds:.0f} s: baseline, tidings, baseline (the "
            "baseline's mean); processes: 4 threads each, one app each, on the same store.",
            "define: as bench/projections.py (projection not included, timed alternately "
            "with a bare save).",
            f"total wall time {elapsed:.0f}s; exit status 1 when a goal is missed",
        ],
    )
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
