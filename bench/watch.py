"""The watch path, measured against the server's own floor in one run: IDLE push latency,
one worker holding thousands of hot accounts, and failover after a worker is killed.

    python bench/watch.py [--accounts 2000] [--appends 50] [--ttl 20] [--quick]

Everything runs against a private Dovecot, a private redis-server (pub/sub channels are
server-wide, so a shared Redis would carry other runs' signals) and a fresh PostgreSQL
schema; workers are ``tidings worker --projections`` child processes (PostgreSQL + Redis,
their own projection thread). Accounts become hot through ``user-active`` signals.

1. latency: one worker, one hot account. Each of N APPENDs (over IMAP) is timed until
   ``list-messages`` (polled from this process) shows it; in the same run a bare
   imapclient IDLE on the same mailbox times Dovecot's own APPEND -> EXISTS (the floor:
   Dovecot delays IDLE pushes by ~0.5 s). Goals: median <= floor + 100 ms, p99 <= floor
   p99 + 300 ms.
2. hot: one worker, N accounts (N Dovecot users, one uid each) made hot: its RSS with
   all N in IDLE (goal <= 150 MB), then one message delivered to every mailbox at once
   (renames into ``new/`` of files staged in ``tmp/``) and the time until all N are
   ingested. Goal <= 1.5x the burst floor of the same run (4.: the same burst answered
   by bare sessions, just before the worker starts and just after it stops; their
   mean), so the goal moves with the machine as the floor does. Floors more than 1.5x
   apart say the others' load moved meanwhile: the ratio is then shown, not judged.
3. failover: a second worker joins and the accounts are shared out; the first is
   killed (SIGKILL). Measured from the server's side (IDLE sessions in Dovecot's process
   titles): the time until every account is in IDLE again. Goal <= lease ttl + 5 s.
   Printed beside it: the login rate the survivor measured (``tidings_watch_login_rate``)
   and when its logins for the orphans started, against the bare logins' own rate.
4. burst floor (with ``hot``): before the first worker starts and after the last has
   stopped, the same burst answered by bare sessions in IDLE on the same mailboxes.

``--quick``: 200 accounts, 20 appends. Every process and temp dir is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis
from imapclient import IMAPClient

from application import User
from application.app import App
from bench._common import Scratch, environment, median, percentile, raw_connection, say
from bench._common import scratch_database as scratch_db
from bench._mail import (
    REPO,
    Line,
    backends_of,
    connect,
    cpu_by_process,
    cpu_by_program,
    cpu_of,
    cpu_seconds,
    free_port,
    idle_users,
    machine_busy,
    mail,
    open_app,
    private_dovecot,
    private_redis,
    proc_status,
    raise_inotify,
    report,
    settings_for,
    stage,
    stop_process,
    wait_until,
    worker_argv,
    worker_env,
)
from infrastructure.bootstrap_workers import build_syncer
from infrastructure.devkit.dovecot import DovecotServer, DovecotUser
from infrastructure.eventstore.recorder import EVENTS_TABLE
from infrastructure.redis.client import replied
from infrastructure.redis.signals import CHANNEL as SIGNAL_CHANNEL
from infrastructure.runtime.settings import Settings
from workers.once import poll_once

MEMBER = frozenset({"TenantMember"})
INGESTED_TOPIC = "tidings.mail.MessageIngested"
USERS_PER_TENANT = 100
WATCH_POOL = 16  # the workers' default watch (and login) pool


# --- workers ------------------------------------------------------------------------------


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[bytes]
    metrics_port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def health(self) -> dict[str, Any] | None:
        url = f"http://127.0.0.1:{self.metrics_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                body: dict[str, Any] = json.loads(response.read())
                return body
        except (OSError, ValueError):
            return None

    def metric(self, name: str) -> float | None:
        """One unlabelled sample from /metrics (None when unreachable or absent)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return float(value)
        return None

    def log_lines(self, marker: str) -> list[str]:
        with contextlib.suppress(OSError):
            return [
                line for line in self.log.read_text(errors="replace").splitlines() if marker in line
            ]
        return []

    def owned(self) -> int:
        health = self.health()
        return int(health.get("accountsOwned", 0)) if health else -1

    def rss_mib(self) -> tuple[float, float]:
        status = proc_status(self.pid)
        return status.get("VmRSS", 0) / 1024, status.get("VmHWM", 0) / 1024

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class Fleet:
    """The worker processes of this run; ``stop_all`` ends every one still alive."""

    settings: Settings
    workdir: Path
    env: dict[str, str]
    workers: list[Worker] = field(default_factory=list)

    def start(self, name: str) -> Worker:
        port = free_port()
        log = self.workdir / f"worker-{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                worker_argv("--worker-id", name, "--projections", "--metrics-port", str(port)),
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(name, proc, port, log)
        self.workers.append(worker)
        try:
            wait_until(lambda: worker.health() is not None or proc.poll() is not None, 60)
            # Signals published before a worker has subscribed are lost (pub/sub keeps
            # nothing): wait until every live worker listens before sending any.
            live = sum(1 for w in self.workers if w.proc.poll() is None)
            wait_until(lambda: self.listeners() >= live or proc.poll() is not None, 30)
        except TimeoutError:
            raise RuntimeError(f"worker {name} not ready:\n{worker.tail()}") from None
        if proc.poll() is not None:
            raise RuntimeError(f"worker {name} exited ({proc.returncode}):\n{worker.tail()}")
        return worker

    def listeners(self) -> int:
        """Subscribers of the signal channel (the workers' signal threads)."""
        assert self.settings.redis_url is not None
        client = redis.Redis.from_url(self.settings.redis_url, socket_timeout=2)
        try:
            return int(
                dict(replied(client.pubsub_numsub(SIGNAL_CHANNEL))).get(SIGNAL_CHANNEL.encode(), 0)
            )
        finally:
            client.close()

    def stop(self, worker: Worker) -> None:
        stop_process(worker.proc, timeout=15)

    def stop_all(self) -> None:
        for worker in self.workers:
            stop_process(worker.proc, timeout=15)


@dataclass(frozen=True)
class OwnCpu:
    """CPU seconds of this run's own processes over a stretch."""

    imap: float  # this run's Dovecot's sessions
    worker_pg: float  # the PostgreSQL backends of the worker's connections
    bench_pg: float  # the backend of the bench's own look at the counts

    def __str__(self) -> str:
        return (
            f"imap {self.imap:.2f}s, PostgreSQL for the worker {self.worker_pg:.2f}s and for "
            f"the bench's look {self.bench_pg:.2f}s"
        )


def hot(app: App, users: list[User]) -> list[float]:
    """A ``user-active`` of each user, one after the other; each call's seconds."""
    took = []
    for user in users:
        started = time.perf_counter()
        result = app.write("user-active", {}, user)
        took.append(time.perf_counter() - started)
        if not result.is_success:
            raise RuntimeError(f"user-active failed: {result.error}")
    return took


def count(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


# --- profiles -----------------------------------------------------------------------------


@dataclass
class Sampler:
    """``--py-spy DIR``: py-spy samples one worker over a measured stretch (non-blocking;
    only the thread holding the GIL, so the samples are where its Python CPU goes, not
    its waits); the collapsed stacks are kept in DIR and the top functions printed.
    Without DIR it does nothing."""

    out: Path | None

    @contextlib.contextmanager
    def record(self, name: str, pid: int) -> Iterator[None]:
        if self.out is None:
            yield
            return
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / f"{name}.txt"
        argv = ["py-spy", "record", "--pid", str(pid), "--rate", "200", "--nonblocking", "--gil"]
        argv += ["--threads", "--format", "raw", "--output", str(path)]
        spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # attached before the stretch begins
        before = thread_cpu(pid)
        try:
            yield
        finally:
            used = {tid: cpu - before.get(tid, 0.0) for tid, cpu in thread_cpu(pid).items()}
            spy.send_signal(signal.SIGINT)
            try:
                _, err = spy.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
                _, err = spy.communicate()
            if path.exists():
                say(f"{name}: py-spy samples in {path}\n" + summarise(path, used))
            else:
                say(f"{name}: py-spy wrote nothing: {err.decode(errors='replace')[-400:]}")


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each live thread of a process, by thread id."""
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
                fields = stat.rsplit(")", 1)[1].split()
                used[int(task)] = (int(fields[11]) + int(fields[12])) / tick
    return used


def summarise(path: Path, used: dict[int, float], top: int = 18) -> str:
    """Each thread's CPU (exact, from /proc; named from the samples), then the samples
    (with the GIL) by function including callees, and by the function on top. On a
    loaded machine a thread preempted while holding the GIL is still sampled: the
    functions' shares are rough, the threads' CPU is not."""
    names: dict[int, str] = {}
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        count_, frames = int(n), stack.split(";")
        total += count_
        head, _, thread = frames[0].partition(": ")  # "thread (TID): name"
        with contextlib.suppress(ValueError):
            names[int(head.split("(")[-1].rstrip(")"))] = thread.rstrip("_0123456789")
        for frame in set(frames[1:]):
            inclusive[frame] = inclusive.get(frame, 0) + count_
        own[frames[-1]] = own.get(frames[-1], 0) + count_
    cpu: dict[str, float] = {}
    for tid, seconds in used.items():
        name = names.get(tid, "(not sampled)")
        cpu[name] = cpu.get(name, 0.0) + seconds
    all_cpu = sum(cpu.values()) or 1.0
    by_thread = "\n".join(
        f"  {seconds:6.2f}s {seconds / all_cpu:6.1%}  {name}"
        for name, seconds in sorted(cpu.items(), key=lambda kv: -kv[1])
        if seconds > 0
    )
    if not total:
        return f"  CPU by thread:\n{by_thread}\n  (no samples)"

    def table(counts: dict[str, int]) -> str:
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return "\n".join(f"  {c / total:6.1%}  {k[:150]}" for k, c in ranked)

    return (
        f"  CPU by thread ({all_cpu:.2f}s):\n{by_thread}\n  {total} samples with the GIL; "
        f"including callees:\n{table(inclusive)}\n  on top:\n{table(own)}"
    )


# --- 1. latency ---------------------------------------------------------------------------


class IdleObserver:
    """A bare imapclient IDLE on a mailbox, on a thread: when each EXISTS arrived."""

    def __init__(self, server: DovecotServer, box: DovecotUser) -> None:
        self.client = IMAPClient(server.host, server.port, ssl=False, timeout=30)
        self.client.login(box.name, box.password)
        selected = self.client.select_folder("INBOX", readonly=True)
        self.exists = int(selected.get(b"EXISTS", 0))
        self.seen: list[tuple[float, int]] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.client.idle()
        self._thread = threading.Thread(target=self._run, name="floor-idle", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                responses = self.client.idle_check(timeout=0.5)
            except Exception:  # the connection closed under us at the end
                return
            now = time.perf_counter()
            for response in responses:
                if len(response) > 1 and response[1] == b"EXISTS":
                    with self._cond:
                        self.seen.append((now, int(response[0])))
                        self._cond.notify_all()

    def arrival(self, exists: int, timeout: float = 30.0) -> float:
        """When the server first reported at least ``exists`` messages."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for at, n in self.seen:
                    if n >= exists:
                        return at
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no EXISTS {exists} within {timeout}s")
                self._cond.wait(left)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with contextlib.suppress(Exception):
            self.client.shutdown()


def bench_latency(server: DovecotServer, app: App, fleet: Fleet, appends: int) -> list[Line]:
    box = server.add_user("latency", secrets.token_urlsafe(12))
    user = User(id="u-latency", tenant_id="t-latency", roles=MEMBER)
    account = connect(app, user, server, box, scope="user")
    app.projections.catch_up()
    first_poll(app, fleet.settings)
    worker = fleet.start("latency")
    hot(app, [user])
    wait_until(lambda: idle_users(server).get(box.name, 0) >= 1, 60, 0.1, "the watch")
    observer = IdleObserver(server, box)
    appender = IMAPClient(server.host, server.port, ssl=False, timeout=30)
    appender.login(box.name, box.password)
    wait_until(lambda: idle_users(server).get(box.name, 0) >= 2, 30, 0.1, "the floor IDLE")
    say(f"latency: {appends} APPENDs, each until list-messages shows it (+3 warm-up)")
    ours: list[float] = []
    floor: list[float] = []
    rng = random.Random(5)
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # the observer thread stamps EXISTS promptly
    try:
        for i in range(appends + 3):
            subject = f"latency {i} {secrets.token_hex(4)}"
            start = time.perf_counter()
            appender.append("INBOX", mail(i, subject))
            deadline = start + 30
            while True:
                result = app.query("list-messages", {"accountId": account, "limit": 5}, user)
                items = result.data["items"] if result.data else []
                if any(item["subject"] == subject for item in items):
                    seen = time.perf_counter()
                    break
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"message {i} not queryable after 30s:\n{worker.tail()}")
                time.sleep(0.002)
            pushed = observer.arrival(observer.exists + i + 1)
            if i >= 3:
                ours.append(seen - start)
                floor.append(pushed - start)
            time.sleep(rng.uniform(0.1, 0.4))
    finally:
        sys.setswitchinterval(old_interval)
        observer.close()
        with contextlib.suppress(Exception):
            appender.logout()
        fleet.stop(worker)
    med, fmed = median(ours) * 1e3, median(floor) * 1e3
    p99, fp99 = percentile(ours, 99) * 1e3, percentile(floor, 99) * 1e3
    say(f"latency: median {med:.0f} ms (floor {fmed:.0f}), p99 {p99:.0f} ms (floor {fp99:.0f})")
    return [
        Line(
            f"APPEND -> queryable, median of {len(ours)} (ms)",
            "postgresql",
            f"{med:.0f}",
            f"{fmed:.0f}",
            f"{med - fmed:+.0f} ms",
            "<= floor + 100 ms",
            med <= fmed + 100,
        ),
        Line(
            "APPEND -> queryable, p99 (ms)",
            "postgresql",
            f"{p99:.0f}",
            f"{fp99:.0f}",
            f"{p99 - fp99:+.0f} ms",
            "<= floor + 300 ms",
            p99 <= fp99 + 300,
        ),
    ]


# --- 2. many hot accounts -----------------------------------------------------------------


@dataclass
class Accounts:
    boxes: list[DovecotUser]
    users: list[User]
    ids: list[str]


def seed_accounts(server: DovecotServer, app: App, settings: Settings, n: int) -> Accounts:
    say(f"hot: {n} Dovecot users and accounts (scope user, {USERS_PER_TENANT} per tenant)")
    boxes, users, ids = [], [], []
    started = time.perf_counter()
    for i in range(n):
        box = server.add_user(f"h{i:05d}", secrets.token_urlsafe(9))
        user = User(id=f"user-{i}", tenant_id=f"tenant-{i // USERS_PER_TENANT}", roles=MEMBER)
        ids.append(connect(app, user, server, box, scope="user"))
        boxes.append(box)
        users.append(user)
        if (i + 1) % 500 == 0:
            say(f"  {i + 1} connected ({(i + 1) / (time.perf_counter() - started):.0f}/s)")
    app.projections.catch_up()
    first_poll(app, settings)
    return Accounts(boxes, users, ids)


def first_poll(app: App, settings: Settings) -> None:
    """Every account polled once, as a worker's first poll does: its folders are listed,
    so its watch has them pushed (NOTIFY) from its start, as in a running deployment."""
    started = time.perf_counter()
    outcomes = poll_once(app, build_syncer(app, settings), concurrency=8, deadline_seconds=120)
    failed = [o for o in outcomes if not o.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} first polls failed: {failed[0].error_kind}")
    say(f"  {len(outcomes)} accounts polled once in {time.perf_counter() - started:.1f}s")


def all_idle(server: DovecotServer, boxes: list[DovecotUser]) -> bool:
    sessions = idle_users(server)
    return all(sessions.get(box.name, 0) >= 1 for box in boxes)


def idle_count(server: DovecotServer, boxes: list[DovecotUser]) -> int:
    sessions = idle_users(server)
    return sum(1 for box in boxes if sessions.get(box.name, 0) >= 1)


@dataclass
class Burst:
    n: int
    ingested: float  # seconds from the first rename until every message is stored


def burst_line(burst: Burst, floors: list[float]) -> Line:
    """The burst against the floor of the same run, measured just before the worker
    started and just after it stopped (goal <= 1.5x their mean). Floors that differ by
    more than 1.5x mean the others' load moved during the run: the ratio is then shown
    but not judged. With no floor (``--only failover``), informational."""
    measured = [floor for floor in floors if floor > 0]
    if not measured:
        reference, compare, goal, passed = "-", "-", "(no floor this run)", None
    else:
        mean = sum(measured) / len(measured)
        ratio = burst.ingested / mean
        reference = " / ".join(f"{floor:.2f}" for floor in measured)
        compare, goal = f"{ratio:.2f}x", "<= 1.5x floor"
        passed = ratio <= 1.5
        if max(measured) > 1.5 * min(measured):
            compare += f" (floors {max(measured) / min(measured):.1f}x apart: unsteady)"
            passed = None
    return Line(
        f"1 new msg in each of {burst.n} accounts -> all ingested (s)",
        "postgresql",
        f"{burst.ingested:.2f}",
        reference,
        compare,
        goal,
        passed,
    )


FULL_POLL = "duplicates="  # only an account's whole poll logs its duplicates (both commits)


def start_up_polls_end(worker: Worker, timeout: float = 180.0) -> tuple[int, float]:
    """Wait until the worker's start-up polls (listing, flags, membership of every
    account it was told of) have ended, so the burst measures the push path alone: two
    one-second windows in a row with no whole poll logged and the worker's CPU under a
    tenth of a core. The polls and the seconds it took."""
    started = time.monotonic()
    calm, polls, cpu = 0, len(worker.log_lines(FULL_POLL)), cpu_seconds(worker.pid)
    while calm < 2:
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"the start-up polls did not end in {timeout:.0f}s")
        time.sleep(1.0)
        now_polls, now_cpu = len(worker.log_lines(FULL_POLL)), cpu_seconds(worker.pid)
        calm = calm + 1 if now_polls == polls and now_cpu - cpu < 0.1 else 0
        polls, cpu = now_polls, now_cpu
    return polls, time.monotonic() - started


def bench_hot(
    server: DovecotServer,
    app: App,
    fleet: Fleet,
    scratch: Scratch,
    accounts: Accounts,
    sampler: Sampler,
) -> tuple[list[Line], Burst, Worker]:
    n = len(accounts.boxes)
    worker = fleet.start("w1")
    started = time.perf_counter()
    hot(app, accounts.users)
    say(f"hot: {n} user-active signals sent; waiting for {n} IDLE sessions")
    try:
        wait_until(lambda: all_idle(server, accounts.boxes), max(120.0, n * 0.15), 0.5, "all IDLE")
    except TimeoutError:
        raise RuntimeError(
            f"only {idle_count(server, accounts.boxes)}/{n} in IDLE:\n{worker.tail()}"
        ) from None
    to_hot = time.perf_counter() - started
    say(f"hot: all {n} in IDLE after {to_hot:.1f}s; waiting for the start-up polls to end")
    polls, quiet = start_up_polls_end(worker)
    say(f"hot: {polls} start-up polls ended {quiet:.1f}s after all IDLE")
    rss_idle, _ = worker.rss_mib()
    fds = len(os.listdir(f"/proc/{worker.pid}/fd"))
    staged = [stage(box, mail(i, f"burst {i}"), i) for i, box in enumerate(accounts.boxes)]
    # One connection for every look (autocommit: each sees the latest commit). A new one
    # per look forked a PostgreSQL backend every 20 ms, CPU the burst then shared.
    poll = raw_connection(scratch)
    # A look counts only the events appended since the burst began (a range of the index
    # on notification_id). Counted by topic over the whole log, every look scanned every
    # event, so its cost grew with whatever earlier work had written: 0.69 s of
    # PostgreSQL's CPU in a 2,000-account burst after the whole-mailbox work's folder
    # events, 0.32 s at fe1311a, CPU taken from the burst it measures.
    since = count(poll, f"SELECT coalesce(max(notification_id), 0) FROM {EVENTS_TABLE}")
    events_sql = (
        f"SELECT count(*) FROM {EVENTS_TABLE} WHERE notification_id > {since} AND topic = %s"
    )
    rows_before = count(poll, "SELECT count(*) FROM mail_messages")
    say(f"hot: RSS {rss_idle:.0f} MiB ({fds} fds); delivering one message to each mailbox")
    with sampler.record("burst", worker.pid):
        cpu0, (busy0, total0) = cpu_seconds(worker.pid), machine_busy()
        backends = backends_of(poll, [worker.pid])
        others0 = cpu_by_process()
        t0 = time.perf_counter()
        for tmp, new in staged:
            os.rename(tmp, new)
        delivered = time.perf_counter() - t0
        try:
            wait_until(
                lambda: count(poll, events_sql, (INGESTED_TOPIC,)) >= n,
                120,
                0.02,
                "all ingested",
            )
        except TimeoutError:
            got = count(poll, events_sql, (INGESTED_TOPIC,))
            poll.close()
            raise RuntimeError(f"only {got}/{n} ingested after 120s:\n{worker.tail()}") from None
        ingested = time.perf_counter() - t0
        cpu, (busy, total) = cpu_seconds(worker.pid) - cpu0, machine_busy()
        others1 = cpu_by_process()
    try:
        busy_share = (busy - busy0) / max(total - total0, 1e-9)
        others = cpu_by_program(others0, others1)
        # This run's own processes: the machine's other users share PostgreSQL and run
        # Dovecots of their own, so the programs' totals carry their CPU too.
        own = OwnCpu(
            cpu_of(others0, others1, server.imap_processes()),
            cpu_of(others0, others1, backends | backends_of(poll, [worker.pid])),
            cpu_of(others0, others1, [poll.info.backend_pid]),
        )
        say(f"hot: CPU of this run's own processes during the burst: {own}")
        top = sorted(others.items(), key=lambda kv: -kv[1])[:8]
        say("hot: CPU by program during the burst: " + ", ".join(f"{k} {v:.2f}s" for k, v in top))
        wait_until(
            lambda: count(poll, "SELECT count(*) FROM mail_messages") >= rows_before + n,
            120,
            0.02,
            "all queryable",
        )
        queryable = time.perf_counter() - t0
    except TimeoutError:
        got = count(poll, events_sql, (INGESTED_TOPIC,))
        raise RuntimeError(f"only {got}/{n} ingested after 120s:\n{worker.tail()}") from None
    finally:
        poll.close()
    rss_after, hwm = worker.rss_mib()
    say(
        f"hot: delivered in {delivered:.2f}s, ingested in {ingested:.2f}s, queryable in "
        f"{queryable:.2f}s; RSS {rss_after:.0f} MiB, peak {hwm:.0f} MiB; worker CPU "
        f"{cpu:.2f}s ({cpu / n * 1e3:.2f} ms an account), Dovecot's imap processes "
        f"{others.get('imap', 0.0):.2f}s, PostgreSQL {others.get('postgres', 0.0):.2f}s; machine "
        f"{busy_share:.0%} busy"
    )
    lines = [
        Line(
            f"time until {n} accounts in IDLE after user-active (s)",
            "postgresql",
            f"{to_hot:.1f}",
            "-",
            "-",
            "(informational)",
            None,
        ),
        Line(
            f"worker RSS holding {n} IDLE accounts (MiB)",
            "postgresql",
            f"{rss_idle:.0f}",
            "-",
            f"{rss_idle / 150:.2f}x of goal",
            "<= 150 MiB",
            rss_idle <= 150,
        ),
        Line(
            "worker peak RSS (VmHWM) after the burst (MiB)",
            "postgresql",
            f"{hwm:.0f}",
            "-",
            f"now {rss_after:.0f}",
            "(informational)",
            None,
        ),
        Line(
            "  ... CPU during it (s): worker / Dovecot imap / PostgreSQL",
            "postgresql",
            f"{cpu:.2f}",
            f"{others.get('imap', 0.0):.2f} / {others.get('postgres', 0.0):.2f}",
            f"machine {busy_share:.0%} busy",
            "(informational)",
            None,
        ),
        Line(
            "  ... of it this run's own (s): imap / the worker's backends / the bench's look",
            "postgresql",
            f"{own.imap:.2f}",
            f"{own.worker_pg:.2f} / {own.bench_pg:.2f}",
            "-",
            "(informational)",
            None,
        ),
        Line(
            "  ... -> all queryable in list-messages (s)",
            "postgresql",
            f"{queryable:.2f}",
            "0.50",
            f"{queryable - 0.5:+.2f} s",
            "(informational)",
            None,
        ),
    ]
    return lines, Burst(n, ingested), worker


# --- 3. failover --------------------------------------------------------------------------


def bench_failover(
    server: DovecotServer,
    app: App,
    fleet: Fleet,
    accounts: Accounts,
    first: Worker,
    ttl: float,
    sampler: Sampler,
) -> list[Line]:
    n = len(accounts.boxes)
    second = fleet.start("w2")
    hot(app, accounts.users)  # the newcomer learns which accounts are hot
    say("failover: waiting until the two workers share the accounts")

    def shared() -> bool:
        a, b = first.owned(), second.owned()
        return a + b >= n and min(a, b) >= n // 3 and all_idle(server, accounts.boxes)

    try:
        wait_until(shared, max(180.0, n * 0.1), 1.0, "a shared fleet")
    except TimeoutError:
        raise RuntimeError(
            f"not shared: w1 {first.owned()}, w2 {second.owned()}, "
            f"{idle_count(server, accounts.boxes)}/{n} IDLE\n{second.tail()}"
        ) from None
    time.sleep(max(3.0, ttl / 3))  # a renewal round after the hand-over
    held = first.owned()
    rate = second.metric("tidings_watch_login_rate") or 0.0
    say(
        f"failover: w1 holds {held}, w2 {second.owned()} (w2 measured {rate:.0f} logins/s); "
        "kill -9 w1"
    )
    killed_wall = time.time()
    t0 = time.perf_counter()
    os.kill(first.pid, signal.SIGKILL)
    first.proc.wait(timeout=10)
    try:
        wait_until(lambda: idle_count(server, accounts.boxes) < n, 15, 0.05, "lost sessions")
    except TimeoutError:
        raise RuntimeError("the killed worker's IDLE sessions did not end on the server") from None
    lost = n - idle_count(server, accounts.boxes)
    noticed = time.perf_counter() - t0
    marks: dict[str, float] = {}

    def back() -> bool:  # when the first, half and all of the lost sessions are back
        returned = idle_count(server, accounts.boxes) - (n - lost)
        for label, share in (("first", 1 / lost), ("half", 0.5), ("all", 1.0)):
            if returned >= share * lost and label not in marks:
                marks[label] = time.perf_counter() - t0
        return returned >= lost

    try:
        with sampler.record("failover", second.pid):
            wait_until(back, ttl * 3 + 60, 0.2, "all IDLE again")
    except TimeoutError:
        raise RuntimeError(
            f"{idle_count(server, accounts.boxes)}/{n} in IDLE {ttl * 3 + 60:.0f}s after the "
            f"kill:\n{second.tail()}"
        ) from None
    recovered = time.perf_counter() - t0
    say(
        f"failover: {lost} sessions gone after {noticed:.2f}s; back in IDLE: the first after "
        f"{marks.get('first', 0):.1f}s, half after {marks.get('half', 0):.1f}s, all {n} after "
        f"{recovered:.1f}s (ttl {ttl:.0f}s); w2 holds {second.owned()}"
    )
    started = prelogins_started(second, killed_wall)
    say(
        "failover: w2's logins for the orphans started "
        + (", ".join(f"{at:.1f}s ({what})" for at, what in started) or "never (no log line)")
        + " after the kill"
    )
    floor = login_floor(server, accounts.boxes[:lost], WATCH_POOL)
    say(
        f"failover: Dovecot alone takes {floor:.1f}s for {lost} logins + EXAMINE + IDLE "
        f"({lost / floor:.0f}/s)"
    )
    return [
        Line(
            f"failover: kill -9 of a worker holding {held} -> all IDLE (s)",
            "postgresql",
            f"{recovered:.1f}",
            f"ttl {ttl:.0f}",
            f"{recovered - ttl:+.1f} s",
            "<= ttl + 5 s",
            recovered <= ttl + 5,
        ),
        Line(
            "  ... the first account back in IDLE (its lease lapsed) (s)",
            "postgresql",
            f"{marks.get('first', 0):.1f}",
            f"ttl {ttl:.0f}",
            f"{marks.get('first', 0) - ttl:+.1f} s",
            "(informational)",
            None,
        ),
        Line(
            "  ... the survivor's logins for them started, after the kill (s)",
            "postgresql",
            f"{started[0][0]:.1f}" if started else "-",
            "-",
            started[0][1] if started else "-",
            "(informational)",
            None,
        ),
        Line(
            "  ... the survivor's measured login rate before the kill (/s)",
            "postgresql",
            f"{rate:.0f}",
            f"{lost / floor:.0f}",
            f"{rate / (lost / floor):.2f}x" if floor else "-",
            "(informational)",
            None,
        ),
        Line(
            f"  Dovecot alone: {lost} logins + EXAMINE + IDLE, {WATCH_POOL} clients (s)",
            "-",
            f"{floor:.1f}",
            "-",
            "-",
            "(the floor of a restart)",
            None,
        ),
    ]


def prelogins_started(worker: Worker, since_wall: float) -> list[tuple[float, str]]:
    """From the worker's log: when (seconds after ``since_wall``) it started logging in
    to a dead worker's accounts, and what it logged then (accounts, rate, lapse)."""
    found = []
    for line in worker.log_lines("failover.logins"):
        fields = dict(part.partition("=")[::2] for part in line.split())
        with contextlib.suppress(KeyError, ValueError):
            at = datetime.fromisoformat(fields["ts"].replace("Z", "+00:00")).timestamp()
            if at >= since_wall:
                what = (
                    f"{fields['accounts']} at {fields['login_rate']}/s, "
                    f"lapse in {fields['lapse_in']}s"
                )
                found.append((at - since_wall, what))
    return found


def login_floor(server: DovecotServer, boxes: list[DovecotUser], clients: int) -> float:
    """Seconds for bare imapclient sessions to log in, EXAMINE and IDLE on ``boxes``,
    ``clients`` at a time: what any worker's restart of these watches costs the server."""
    sessions: list[IMAPClient] = []
    lock = threading.Lock()

    def one(box: DovecotUser) -> None:
        client = IMAPClient(server.host, server.port, ssl=False, timeout=30)
        client.login(box.name, box.password)
        client.select_folder("INBOX", readonly=True)
        client.idle()
        with lock:
            sessions.append(client)

    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=clients) as pool:
            list(pool.map(one, boxes))
        return time.perf_counter() - started
    finally:
        for client in sessions:
            with contextlib.suppress(Exception):
                client.shutdown()


# --- 4. the server's own share of a burst -------------------------------------------------


def bench_burst_floor(  # noqa: C901
    server: DovecotServer, boxes: list[DovecotUser], when: str
) -> tuple[list[Line], float]:
    """What Dovecot alone needs for the burst: bare sessions (raw sockets, one thread, no
    parsing) in IDLE on the same mailboxes, one message delivered to each, and on EXISTS
    the exchange a watch sends (DONE, the new mail's metadata, its body, IDLE) in one
    write. Run while no worker runs (``when``: before the first, after the last), so
    only these sessions see the mail."""
    n = len(boxes)
    say(f"burst floor: {n} bare sessions in IDLE")
    sockets: list[socket.socket] = []
    uidnext: list[int] = []

    def login(box: DovecotUser) -> tuple[socket.socket, int]:
        sock = socket.create_connection((server.host, server.port), timeout=30)
        reader = sock.makefile("rb")
        reader.readline()
        sock.sendall(f"a LOGIN {box.name} {box.password}\r\nb EXAMINE INBOX\r\nc IDLE\r\n".encode())
        nxt = 0
        while not (line := reader.readline()).startswith(b"+"):
            if b"[UIDNEXT " in line:
                nxt = int(line.split(b"[UIDNEXT ", 1)[1].split(b"]", 1)[0])
        return sock, nxt

    with ThreadPoolExecutor(max_workers=WATCH_POOL) as pool:
        for sock, nxt in pool.map(login, boxes):
            sockets.append(sock)
            uidnext.append(nxt)
    try:
        time.sleep(3)
        staged = [stage(box, mail(i, f"floor {i}"), i) for i, box in enumerate(boxes)]
        metadata = "UID RFC822.SIZE INTERNALDATE FLAGS BODY.PEEK[HEADER.FIELDS (MESSAGE-ID DATE)]"
        selector = selectors.DefaultSelector()
        for i, sock in enumerate(sockets):
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, i)
        waiting, heard = [b""] * n, [False] * n
        done = 0
        cpu0 = cpu_by_process()
        t0 = time.perf_counter()
        for tmp, new in staged:
            os.rename(tmp, new)
        while done < n and time.perf_counter() - t0 < 120:
            for key, _ in selector.select(1.0):
                i = key.data
                with contextlib.suppress(BlockingIOError):
                    waiting[i] += sockets[i].recv(65536)
                if not heard[i] and b"EXISTS" in waiting[i]:
                    heard[i], waiting[i] = True, b""
                    u = uidnext[i]
                    sockets[i].sendall(
                        f"DONE\r\nd UID FETCH {u}:* ({metadata})\r\n"
                        f"e UID FETCH {u}:{u + 7} (BODY.PEEK[]<0.131072>)\r\nf IDLE\r\n".encode()
                    )
                elif heard[i] and waiting[i].endswith(b"+ idling\r\n"):
                    waiting[i] = b"-"
                    done += 1
        floor = time.perf_counter() - t0
        imap_cpu = cpu_of(cpu0, cpu_by_process(), server.imap_processes())
    finally:
        for sock in sockets:
            sock.close()
    say(
        f"burst floor: {done}/{n} fetched and back in IDLE after {floor:.2f}s "
        f"(imap {imap_cpu:.2f}s CPU)"
    )
    return [
        Line(
            f"  Dovecot alone: the same burst, a bare client's exchange ({n}), {when} (s)",
            "-",
            f"{floor:.2f}",
            f"imap {imap_cpu:.2f}",
            "-",
            "(the floor of the burst)",
            None,
        )
    ], floor


# --- main ---------------------------------------------------------------------------------


@contextlib.contextmanager
def bench_env(
    accounts: int, ttl: float
) -> Iterator[tuple[DovecotServer, Scratch, Settings, App, Fleet]]:
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(private_dovecot(sessions=2 * accounts + 100))
        redis_url = stack.enter_context(private_redis())
        scratch = stack.enter_context(scratch_db("postgresql", "watch"))
        settings = settings_for(scratch.url, scratch.workdir / "blobs", redis_url=redis_url)
        app = open_app(settings)
        stack.callback(app.close)
        env = worker_env(
            settings,
            TIDINGS_WATCH_LEASE_TTL=str(ttl),
            # One worker must be able to hold every account: sockets for all the watches
            # plus the polls beside them (the default per-host cap is 2,000).
            TIDINGS_PER_HOST_CONN_CAP=str(accounts + 100),
            TIDINGS_HOT_BUDGET_PER_WORKER=str(max(2000, accounts)),
            TIDINGS_MAX_ACCOUNTS_PER_WORKER=str(max(5000, accounts)),
        )
        fleet = Fleet(settings, scratch.workdir, env)
        stack.callback(fleet.stop_all)
        yield server, scratch, settings, app, fleet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, help="hot accounts (2,000; quick 200)")
    parser.add_argument("--appends", type=int, help="timed APPENDs (50; quick 20)")
    parser.add_argument("--ttl", type=float, default=20.0, help="watch lease ttl, s (20)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="sample the worker with py-spy during the burst and the failover (skews both)",
    )
    parser.add_argument(
        "--only", choices=["latency", "hot", "failover"], action="append", help="repeatable"
    )
    args = parser.parse_args(argv)
    n = args.accounts or (200 if args.quick else 2000)
    appends = args.appends or (20 if args.quick else 50)
    only = set(args.only or ["latency", "hot", "failover"])
    inotify = raise_inotify(max(1024, n + 256))
    started = time.perf_counter()
    lines: list[Line] = []
    with bench_env(n, args.ttl) as (server, scratch, settings, app, fleet):
        files = server.root.parent if server.root else "?"
        if "latency" in only:
            lines += bench_latency(server, app, fleet, appends)
        if only & {"hot", "failover"}:
            accounts = seed_accounts(server, app, settings, n)
            floors: list[float] = []
            floor_lines: list[Line] = []
            if "hot" in only:  # the floor before the worker starts, and again after
                floor_lines, floor = bench_burst_floor(server, accounts.boxes, "before")
                floors.append(floor)
            sampler = Sampler(args.py_spy)
            hot_lines, burst, first = bench_hot(server, app, fleet, scratch, accounts, sampler)
            failover = []
            if "failover" in only:
                failover = bench_failover(server, app, fleet, accounts, first, args.ttl, sampler)
            if "hot" in only:
                fleet.stop_all()
                after_lines, floor = bench_burst_floor(server, accounts.boxes, "after")
                floors.append(floor)
                # The burst's line in its place: after the RSS lines, before its CPU.
                lines += [*hot_lines[:3], burst_line(burst, floors), *hot_lines[3:]]
                lines += [*floor_lines, *after_lines]
            lines += failover
    elapsed = time.perf_counter() - started
    report(
        "tidings watch path vs Dovecot's own floor (same run, same machine)",
        lines,
        [
            *environment(["postgresql"]),
            f"IMAP: private Dovecot 2.3, its files in {files}, one uid per user; "
            f"fs.inotify.max_user_instances {inotify}; Redis: a private redis-server",
        ],
        notes=[
            "workers: `tidings worker --projections --metrics-port P` children on PostgreSQL "
            f"+ Redis, TIDINGS_WATCH_LEASE_TTL={args.ttl:.0f}, "
            f"TIDINGS_PER_HOST_CONN_CAP={n + 100}; accounts made hot by user-active.",
            "latency: APPEND over IMAP -> the message in list-messages (polled every 2 ms "
            "from this process); floor: a bare imapclient IDLE on the same mailbox, "
            "APPEND -> EXISTS (Dovecot's built-in ~0.5 s push delay).",
            "hot: RSS = VmRSS of the worker with every account in IDLE and its start-up "
            "polls ended; "
            "burst = one file per mailbox renamed from tmp/ to new/ at once, timed from the "
            "first rename until every MessageIngested is stored (then: in the read model).",
            "failover: two workers share the accounts; SIGKILL of one; time until Dovecot's "
            "process titles show an IDLE session for every account again. The leases lapse "
            "up to ttl after the kill; the survivor logs in while they run out (parked "
            "sessions), so the logins, timed after it with bare imapclient sessions, are "
            "only the floor of a restart that did not prepare (Dovecot in high-performance "
            "login mode, one uid and one imap process per user).",
            "burst floor: before the first worker and after the last, bare sessions (raw "
            "sockets, one thread) in IDLE on the same mailboxes get one message each and "
            "send a watch's exchange (DONE, metadata FETCH, body FETCH, IDLE, in one "
            "write); CPU from /proc/*/schedstat.",
            f"total wall time {elapsed:.0f}s; exit status 1 when a goal is missed",
        ],
        reference="floor / ttl",
    )
    return 0 if all(line.passed is not False for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
