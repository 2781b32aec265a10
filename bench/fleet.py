"""A 10,000-account fleet on one machine: four ``tidings worker`` processes share the hot
accounts through Redis, against the IMAP simulator (``bench/imap_sim.py``), which holds
10,000 idle sessions in one process where Dovecot would need a process per session.

    python bench/fleet.py [--accounts 10000] [--workers 4] [--ttl 20]

PostgreSQL (a fresh schema), a private redis-server, the simulator as a child process
(one user and one INBOX per account), and ``tidings worker --projections`` children.
Every account is made hot by a ``user-active`` of its owner. Rows, in run order:

1. accounts per worker, once every account is in IDLE: the largest deviation from the
   fair share (accounts / workers). Goal: within ±10%.
2. RSS per worker with every account in IDLE. Goal: <= 400 MiB each.
3. one new message in every account (the simulator adds them and pushes EXISTS at once)
   -> all queryable (rows in ``mail_messages``). Goal: <= 10 s.
4. a fifth worker joins -> rebalanced (each worker within ±10% of the new fair share,
   every account in IDLE) with no account ever in IDLE twice at once (the simulator
   counts every mailbox that gets a second session in IDLE). Goal: within 2 fleet ticks
   (a tick is min(5 s, ttl / 6)) from when the new worker is up (its /healthz answers
   and it listens for signals; the process start before that is shown beside it).
5. kill -9 of one worker -> each of its accounts in IDLE again (the simulator's count of
   mailboxes in IDLE back to all). Goal: <= ttl + 5 s.

``--accounts 500`` for a quick run while developing. Every process and temp dir is
removed at the end; the exit status is 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from application import User
from application.app import App
from bench._common import Scratch, environment, median, percentile, raw_connection, say
from bench._common import scratch_database as scratch_db
from bench._mail import (
    Line,
    cpu_by_process,
    cpu_by_program,
    cpu_seconds,
    machine_busy,
    open_app,
    private_redis,
    report,
    settings_for,
    wait_until,
    worker_env,
)
from bench.imap_sim import SimulatorProcess, password_of, user_name
from bench.watch import Fleet, Worker, count, hot
from infrastructure.eventstore.recorder import EVENTS_TABLE

MEMBER = frozenset({"TenantMember"})
USERS_PER_TENANT = 100
INGESTED_TOPIC = "tidings.mail.MessageIngested"
FAIR_TOLERANCE = 0.10
RSS_GOAL_MIB = 400.0
BURST_GOAL_S = 10.0


@dataclass
class Accounts:
    users: list[User]
    ids: list[str]


def seed(app: App, sim: SimulatorProcess, n: int) -> Accounts:
    say(f"seed: {n} accounts (scope user, {USERS_PER_TENANT} users per tenant)")
    users, ids = [], []
    started = time.perf_counter()
    for i in range(n):
        name = user_name(i)
        user = User(id=f"user-{i}", tenant_id=f"tenant-{i // USERS_PER_TENANT}", roles=MEMBER)
        payload = {
            "provider": "imap",
            "displayName": f"Box {name}",
            "address": f"{name}@sim.example",
            "scope": "user",
            "authMethod": "password",
            "imap": {"host": sim.host, "port": sim.port, "security": "none", "username": name},
            "secret": password_of(name),
        }
        result = app.write("connect-mail-account", payload, user)
        if not result.is_success or result.data is None:
            raise RuntimeError(f"connect-mail-account failed: {result.error}")
        ids.append(str(result.data["accountId"]))
        users.append(user)
        if (i + 1) % 1000 == 0:
            say(f"  {i + 1} connected ({(i + 1) / (time.perf_counter() - started):.0f}/s)")
    app.projections.catch_up()
    say(f"seed: {n} accounts in {time.perf_counter() - started:.1f}s")
    return Accounts(users, ids)


def owned(workers: list[Worker]) -> dict[str, int]:
    return {w.name: w.owned() for w in workers}


def spread(counts: dict[str, int], total: int) -> float:
    """The largest deviation of a worker's count from the fair share, as a fraction."""
    fair = total / max(len(counts), 1)
    return max(abs(c - fair) for c in counts.values()) / fair if counts else math.inf


def balanced(sim: SimulatorProcess, workers: list[Worker], n: int) -> bool:
    counts = owned(workers)
    return (
        sum(counts.values()) == n
        and spread(counts, n) <= FAIR_TOLERANCE
        and sim.stats()["idleUsers"] == n
    )


def fmt_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


@contextlib.contextmanager
def profiled(
    worker: Worker, out: Path | None, label: str, *, waits: bool = False
) -> Iterator[None]:
    """``py-spy record --gil`` (CPU, not waits; ``waits``: ``--idle``, every thread's
    stacks, waiting ones too) of one worker while the block runs, as raw collapsed stacks
    in ``out`` (nothing without ``out`` or without py-spy)."""
    binary = shutil.which("py-spy")
    if out is None or binary is None:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{label}-{worker.name}.txt"
    mode = "--idle" if waits else "--gil"
    # --nonblocking: a paused worker queues its pages into larger batches, which moved
    # the burst from one of its two modes to the other (bench/README.md, fleet.py).
    argv = [binary, "record", "-p", str(worker.pid), mode, "--nonblocking", "-r", "50", "-f", "raw"]
    proc = subprocess.Popen(
        [*argv, "-o", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


# --- the phases ---------------------------------------------------------------------------


def phase_hot(
    sim: SimulatorProcess, app: App, workers: list[Worker], accounts: Accounts
) -> tuple[list[Line], float]:
    n = len(accounts.ids)
    say(f"hot: {len(workers)} workers; waiting for the first polls to finish")
    wait_until(lambda: sim.stats()["logins"] >= n, max(120.0, n * 0.05), 0.5, "first polls")
    time.sleep(3)
    before = sim.stats()
    t0 = time.perf_counter()
    calls = hot(app, accounts.users)
    sent = time.perf_counter() - t0
    say(f"hot: {n} user-active in {sent:.1f}s; waiting for {n} accounts in IDLE")
    try:
        wait_until(lambda: sim.stats()["idleUsers"] >= n, max(180.0, n * 0.06), 0.5, "all IDLE")
    except TimeoutError:
        raise RuntimeError(
            f"only {sim.stats()['idleUsers']}/{n} in IDLE ({fmt_counts(owned(workers))}):\n"
            f"{workers[0].tail()}"
        ) from None
    to_idle = time.perf_counter() - t0
    say(f"hot: all {n} in IDLE after {to_idle:.1f}s; settling 5 s")
    time.sleep(5)
    counts = owned(workers)
    dev = spread(counts, n)
    rss = {w.name: w.rss_mib()[0] for w in workers}
    stats = sim.stats()
    say(
        f"hot: owned {fmt_counts(counts)}; RSS "
        + ", ".join(f"{k} {v:.0f}" for k, v in rss.items())
        + f" MiB; logins {stats['logins'] - before['logins']} for the watches; "
        f"doubled {stats['doubled']}"
    )
    fair = n / len(workers)
    call_ms = median(calls) * 1000
    return [
        Line(
            f"user-active, one caller, {n} calls beside the fleet: median / p99 (ms)",
            "postgresql",
            f"{call_ms:.3f} / {percentile(calls, 0.99) * 1000:.3f}",
            "-",
            "-",
            "median <= 1 ms",
            call_ms <= 1.0,
        ),
        Line(
            f"time until {n} accounts in IDLE after user-active (s)",
            "postgresql",
            f"{to_idle:.1f}",
            f"user-active {sent:.1f}",
            "-",
            "(informational)",
            None,
        ),
        Line(
            f"accounts per worker, {len(workers)} workers (fair {fair:.0f})",
            "postgresql",
            f"{min(counts.values())}-{max(counts.values())}",
            f"{fair:.0f}",
            f"±{dev:.1%}",
            f"within ±{FAIR_TOLERANCE:.0%}",
            dev <= FAIR_TOLERANCE,
        ),
        Line(
            f"RSS per worker holding ~{fair:.0f} IDLE accounts (MiB)",
            "postgresql",
            f"{max(rss.values()):.0f}",
            f"min {min(rss.values()):.0f}",
            f"{max(rss.values()) / RSS_GOAL_MIB:.2f}x of goal",
            f"<= {RSS_GOAL_MIB:.0f} MiB",
            max(rss.values()) <= RSS_GOAL_MIB,
        ),
        Line(
            "  mailboxes ever in IDLE twice at once (server's count)",
            "-",
            str(stats["doubled"]),
            "-",
            "-",
            "(informational)",
            None,
        ),
    ], to_idle


def phase_burst(
    sim: SimulatorProcess, scratch: Scratch, workers: list[Worker], n: int
) -> list[Line]:
    events_sql = f"SELECT count(*) FROM {EVENTS_TABLE} WHERE topic = %s"
    poll = raw_connection(scratch)
    try:
        events_before = count(poll, events_sql, (INGESTED_TOPIC,))
        rows_before = count(poll, "SELECT count(*) FROM mail_messages")
        say(f"burst: one new message in each of {n} mailboxes")
        cpu0 = cpu_by_process()
        workers_cpu0 = sum(cpu_seconds(w.pid) for w in workers)
        sim_cpu0 = cpu_seconds(sim.pid)
        busy0, total0 = machine_busy()
        t0 = time.perf_counter()
        delivered = sim.call("deliver")["delivered"]
        pushed = time.perf_counter() - t0
        try:
            wait_until(
                lambda: count(poll, events_sql, (INGESTED_TOPIC,)) >= events_before + n,
                max(120.0, n * 0.02),
                0.05,
                "all ingested",
            )
            ingested = time.perf_counter() - t0
            wait_until(
                lambda: count(poll, "SELECT count(*) FROM mail_messages") >= rows_before + n,
                120,
                0.05,
                "all queryable",
            )
            queryable = time.perf_counter() - t0
        except TimeoutError:
            got = count(poll, events_sql, (INGESTED_TOPIC,)) - events_before
            raise RuntimeError(f"only {got}/{n} ingested:\n{workers[0].tail()}") from None
    finally:
        poll.close()
    busy, total = machine_busy()
    cpu1 = cpu_by_process()
    by_program = cpu_by_program(cpu0, cpu1)

    # All threads of each (schedstat of a pid is its main thread's alone).
    workers_cpu = sum(cpu_seconds(w.pid) for w in workers) - workers_cpu0
    sim_cpu = cpu_seconds(sim.pid) - sim_cpu0
    busy_share = (busy - busy0) / max(total - total0, 1e-9)
    top = sorted(by_program.items(), key=lambda kv: -kv[1])[:6]
    say(
        f"burst: {delivered} delivered and pushed in {pushed:.2f}s, ingested after "
        f"{ingested:.2f}s, queryable after {queryable:.2f}s; CPU "
        + ", ".join(f"{k} {v:.1f}s" for k, v in top)
        + f"; workers {workers_cpu:.1f}s ({workers_cpu / n * 1e3:.2f} ms an account), "
        f"simulator {sim_cpu:.1f}s; machine {busy_share:.0%} busy"
    )
    return [
        Line(
            f"1 new msg in each of {n} accounts -> all queryable (s)",
            "postgresql",
            f"{queryable:.2f}",
            f"ingested {ingested:.2f}",
            f"{queryable / BURST_GOAL_S:.2f}x of goal",
            f"<= {BURST_GOAL_S:.0f} s",
            queryable <= BURST_GOAL_S,
        ),
        Line(
            "  ... CPU during it (s): workers (reference: PostgreSQL / simulator)",
            "postgresql",
            f"{workers_cpu:.1f}",
            f"{by_program.get('postgres', 0.0):.1f} / {sim_cpu:.1f}",
            f"machine {busy_share:.0%} busy",
            "(informational)",
            None,
        ),
    ]


def phase_join(
    sim: SimulatorProcess,
    fleet: Fleet,
    workers: list[Worker],
    n: int,
    tick: float,
    prof: Path | None = None,
    waits: bool = False,
) -> list[Line]:
    sim.call("reset_doubled")
    say(f"join: a fifth worker; goal: rebalanced within 2 ticks ({2 * tick:.1f}s)")
    cpu0 = cpu_by_process()
    workers_cpu0 = {w.name: cpu_seconds(w.pid) for w in workers}
    sim_cpu0 = cpu_seconds(sim.pid)
    busy0, total0 = machine_busy()
    t0 = time.perf_counter()
    newcomer = fleet.start(f"w{len(workers) + 1}")
    ready = time.perf_counter() - t0
    workers.append(newcomer)
    t1 = time.perf_counter()  # the newcomer is up: its first tick has run
    try:
        # Its logins bound the hand-over.
        with profiled(newcomer, prof, "join-newcomer", waits=waits):
            wait_until(lambda: balanced(sim, workers, n), max(60.0, 10 * tick), 0.2, "rebalanced")
        took: float | None = time.perf_counter() - t1
    except TimeoutError:
        took = None
    busy, total = machine_busy()
    by_program = cpu_by_program(cpu0, cpu_by_process())
    top = sorted(by_program.items(), key=lambda kv: -kv[1])[:4]
    each = {w.name: cpu_seconds(w.pid) - workers_cpu0.get(w.name, 0.0) for w in workers}
    say(
        "join: CPU from the newcomer's start until rebalanced: "
        + ", ".join(f"{k} {v:.1f}s" for k, v in each.items())
        + f", simulator {cpu_seconds(sim.pid) - sim_cpu0:.1f}s; by program "
        + ", ".join(f"{k} {v:.1f}s" for k, v in top)
        + f"; machine {(busy - busy0) / max(total - total0, 1e-9):.0%} busy"
    )
    counts = owned(workers)
    stats = sim.stats()
    say(
        f"join: ready after {ready:.1f}s; "
        + (f"rebalanced {took:.1f}s after that" if took is not None else "NOT rebalanced")
        + f"; owned {fmt_counts(counts)}; in IDLE {stats['idleUsers']}/{n}; doubled "
        f"{stats['doubled']} {stats['doubledUsers'][:5]}"
    )
    passed = took is not None and took <= 2 * tick and stats["doubled"] == 0
    return [
        Line(
            f"a fifth worker up -> each within ±{FAIR_TOLERANCE:.0%} of {n / len(workers):.0f}"
            ", all IDLE (s)",
            "postgresql",
            f"{took:.1f}" if took is not None else f"not in {max(60.0, 10 * tick):.0f}",
            f"tick {tick:.1f}; start {ready:.1f}",
            f"{took / tick:.1f} ticks" if took is not None else fmt_counts(counts),
            "<= 2 ticks, none twice",
            passed,
        ),
        Line(
            "  ... mailboxes in IDLE twice at once meanwhile (server's count)",
            "-",
            str(stats["doubled"]),
            "0",
            "-",
            "0",
            stats["doubled"] == 0,
        ),
    ]


def phase_kill(sim: SimulatorProcess, workers: list[Worker], n: int, ttl: float) -> list[Line]:
    sim.call("reset_doubled")
    victim = workers[0]
    held = victim.owned()
    say(f"kill: kill -9 {victim.name} holding {held}")
    t0 = time.perf_counter()
    os.kill(victim.pid, signal.SIGKILL)
    victim.proc.wait(timeout=10)
    workers.remove(victim)
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: sim.stats()["idleUsers"] < n, 15, 0.05, "lost sessions")
    lost = n - sim.stats()["idleUsers"]
    marks: dict[str, float] = {}

    def back() -> bool:
        idle = int(sim.stats()["idleUsers"])
        returned = idle - (n - lost)
        for label, share in (("first", 1 / max(lost, 1)), ("half", 0.5)):
            if returned >= share * lost and label not in marks:
                marks[label] = time.perf_counter() - t0
        return idle >= n

    try:
        wait_until(back, ttl * 3 + 60, 0.1, "all IDLE again")
        took: float | None = time.perf_counter() - t0
    except TimeoutError:
        took = None
    stats = sim.stats()
    say(
        f"kill: {lost} sessions lost; back: first {marks.get('first', -1):.1f}s, half "
        f"{marks.get('half', -1):.1f}s, all "
        + (f"{took:.1f}s" if took is not None else "NOT")
        + f" (ttl {ttl:.0f}s); owned {fmt_counts(owned(workers))}; doubled {stats['doubled']}"
    )
    return [
        Line(
            f"kill -9 of a worker holding {held} -> all IDLE again (s)",
            "postgresql",
            f"{took:.1f}" if took is not None else "never",
            f"ttl {ttl:.0f}",
            f"{took - ttl:+.1f} s" if took is not None else "-",
            "<= ttl + 5 s",
            took is not None and took <= ttl + 5,
        ),
        Line(
            "  ... the first / half of them back in IDLE (s)",
            "postgresql",
            f"{marks.get('first', -1):.1f} / {marks.get('half', -1):.1f}",
            f"ttl {ttl:.0f}",
            "-",
            "(informational)",
            None,
        ),
        Line(
            "  ... mailboxes in IDLE twice at once meanwhile (server's count)",
            "-",
            str(stats["doubled"]),
            "0",
            "-",
            "(informational)",
            None,
        ),
    ]


# --- main ---------------------------------------------------------------------------------


@contextlib.contextmanager
def bench_env(
    n: int,
    workers: int,
    ttl: float,
    keep_logs: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[tuple[SimulatorProcess, Scratch, App, Fleet]]:
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(scratch_db("postgresql", "fleet"))
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            stack.callback(
                lambda: [shutil.copy(log, keep_logs) for log in scratch.workdir.glob("*.log")]
            )
        sim = SimulatorProcess(n, scratch.workdir / "imap-sim.log")
        stack.callback(sim.close)
        redis_url = stack.enter_context(private_redis())
        settings = settings_for(scratch.url, scratch.workdir / "blobs", redis_url=redis_url)
        app = open_app(settings)
        stack.callback(app.close)
        per_worker = math.ceil(n / workers)
        env = worker_env(
            settings,
            TIDINGS_WATCH_LEASE_TTL=str(ttl),
            # Every account is on one host: its cap must hold a worker's share and more.
            TIDINGS_PER_HOST_CONN_CAP=str(n + 100),
            # The fleet's hot budget is this times the live workers: room for all of them.
            TIDINGS_HOT_BUDGET_PER_WORKER=str(max(2000, int(per_worker * 1.25) + 1)),
            **(extra_env or {}),
        )
        fleet = Fleet(settings, scratch.workdir, env)
        stack.callback(fleet.stop_all)
        yield sim, scratch, app, fleet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, default=10_000, help="hot accounts (10,000)")
    parser.add_argument("--workers", type=int, default=4, help="workers at the start (4)")
    parser.add_argument("--ttl", type=float, default=20.0, help="watch lease ttl, s (20)")
    parser.add_argument("--keep-logs", type=Path, help="copy the worker logs here at the end")
    parser.add_argument(
        "--login-pool", type=int, help="the workers' TIDINGS_WATCH_LOGIN_POOL (their default)"
    )
    parser.add_argument(
        "--profile", type=Path, help="py-spy (CPU) profiles of a worker per phase, into this dir"
    )
    parser.add_argument(
        "--profile-waits",
        action="store_true",
        help="profile every thread, waiting ones too (where a phase waits, not what it burns)",
    )
    args = parser.parse_args(argv)
    n, ttl = args.accounts, args.ttl
    tick = min(5.0, ttl / 6)
    started = time.perf_counter()
    load = os.getloadavg()
    lines: list[Line] = []
    extra = {} if args.login_pool is None else {"TIDINGS_WATCH_LOGIN_POOL": str(args.login_pool)}
    with bench_env(n, args.workers, ttl, args.keep_logs, extra) as (sim, scratch, app, fleet):
        accounts = seed(app, sim, n)
        workers = [fleet.start(f"w{i + 1}") for i in range(args.workers)]
        prof, waits = args.profile, args.profile_waits
        with profiled(workers[0], prof, "hot", waits=waits):
            hot_lines, _ = phase_hot(sim, app, workers, accounts)
        lines += hot_lines
        with profiled(workers[0], prof, "burst", waits=waits):
            lines += phase_burst(sim, scratch, workers, n)
        with profiled(workers[1], prof, "join", waits=waits):
            lines += phase_join(sim, fleet, workers, n, tick, prof, waits)
        # A survivor: the first worker is killed.
        with profiled(workers[1], prof, "kill", waits=waits):
            lines += phase_kill(sim, workers, n, ttl)
        final = sim.stats()
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()
    report(
        f"tidings: a {n}-account fleet on one machine ({args.workers} workers, then "
        f"{args.workers + 1}, then one killed)",
        lines,
        [
            *environment(["postgresql"]),
            "IMAP: bench/imap_sim.py (asyncio, one process, one INBOX per user); Redis: a "
            "private redis-server",
            f"load average at the start {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, at the end "
            f"{load_after[0]:.1f} {load_after[1]:.1f} {load_after[2]:.1f}",
        ],
        notes=[
            "workers: `tidings worker --projections --metrics-port P` children on PostgreSQL "
            f"+ Redis, TIDINGS_WATCH_LEASE_TTL={ttl:.0f} (fleet tick {tick:.1f}s), "
            f"TIDINGS_PER_HOST_CONN_CAP={n + 100}, TIDINGS_HOT_BUDGET_PER_WORKER="
            f"{max(2000, int(math.ceil(n / args.workers) * 1.25) + 1)}"
            + "".join(f", {k}={v}" for k, v in extra.items())
            + "; accounts made hot by user-active of their owners.",
            "accounts per worker: each worker's /healthz accountsOwned (leases held) with "
            "every account in IDLE at the simulator; RSS: VmRSS, settled 5 s.",
            "burst: the simulator adds one message to every INBOX and pushes EXISTS to its "
            "IDLE session, timed from the request until mail_messages holds every one.",
            "join / kill: the simulator's own count of mailboxes with a session in IDLE, and "
            "of mailboxes that got a second session in IDLE while one was there.",
            f"server totals: {final['logins']} logins, {final['accepted']} connections "
            f"accepted, {final['badCommands']} commands answered BAD.",
            f"total wall time {elapsed:.0f}s; exit status 1 when a goal is missed",
        ],
        reference="reference",
    )
    return 0 if all(line.passed is not False for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
