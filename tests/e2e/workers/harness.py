"""The worker fleet of the end-to-end tests: ``tidings worker`` processes and the mail
server's own view of who is watching (the private servers are in ``servers``).

- ``Fleet``: one test's world — a Dovecot, a Redis, a database (schema), the test's own
  app (``bootstrap``) for writes and queries, and the worker processes. ``close()``
  tears everything down, killing any worker still running.
- ``Watchers``: a background sampler of Dovecot's process titles
  (``dovecot/imap [user 127.0.0.1 IDLE]``): how many sessions each mailbox has in IDLE at
  every sample, and whether any mailbox was ever in IDLE twice at once.

Timing is asserted twice: the product's bound on the workers' own log timestamps (when a
worker started or stopped a watch, lost a lease...), and the same bound plus
``timing.OBSERVE_SLACK`` on what the test saw at the server, which a loaded machine
delays. Every duration is in ``tests.e2e.timing``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
import secrets
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from application import User
from application.app import App
from infrastructure.bootstrap import bootstrap
from infrastructure.devkit.processes import free_port
from tests.e2e import timing
from tests.e2e.process import ROOT, cli_env, command
from tests.e2e.workers.servers import RedisServer, wait_for
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.messages import make_message
from tests.support.results import ok

INGESTED = "tidings.mail.MessageIngested"
_TITLE = re.compile(r"dovecot/imap \[(\S+) (\S+)(?: (.*))?\]")
# Dovecot sends "* OK Still here" this often to every IDLE session, so a watch hears
# something every second and never needs a liveness probe (TIDINGS_WATCH_PROBE_AFTER)
# unless its path goes silent; test_quiet_idle runs a Dovecot without keepalives.
DOVECOT_EXTRA = f"imap_idle_notify_interval = {timing.KEEPALIVE:.0f} secs\n"


@dataclass(frozen=True)
class LogEvent:
    """One key=value log line of a worker: ``at`` (unix time), the event, its fields."""

    at: float
    worker: str
    event: str
    fields: dict[str, str]


def parse_log(worker: str, text: str) -> list[LogEvent]:
    events = []
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 4 or not parts[0].startswith("ts="):
            continue
        at = datetime.fromisoformat(parts[0][3:]).timestamp()
        event, *pairs = parts[3].split()
        fields = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        events.append(LogEvent(at, worker, event, fields))
    return events


# --- worker processes ----------------------------------------------------------------


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[bytes]
    metrics_port: int
    log_path: Path

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _get(self, path: str) -> tuple[int, bytes]:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timing.CLIENT) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def healthz(self) -> tuple[int, dict[str, Any]]:
        status, body = self._get("/healthz")
        return status, json.loads(body)

    def healthy(self) -> bool:
        try:
            return self.healthz()[0] == 200
        except OSError:
            return False

    def metrics(self) -> str:
        status, body = self._get("/metrics")
        assert status == 200
        return body.decode()

    def metric(self, name: str, labels: str = "") -> float:
        """One sample's value from /metrics (0 when absent), e.g. ``metric("x", 'a="b"')``."""
        wanted = f"{name}{{{labels}}}" if labels else name
        for line in self.metrics().splitlines():
            key, _, value = line.rpartition(" ")
            if key == wanted:
                return float(value)
        return 0.0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def events(self) -> list[LogEvent]:
        return parse_log(self.name, self.log())

    def signal(self, signum: int) -> None:
        if self.alive:
            self.proc.send_signal(signum)

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timing.PROCESS_EXIT)


# --- the server's view ----------------------------------------------------------------


def idle_processes(dovecot: DovecotServer, *, idle_only: bool = True) -> dict[str, set[int]]:
    """Mailbox user -> the pids of its sessions in IDLE right now (one process each);
    with ``idle_only=False`` of all its logged-in sessions, whatever they do."""
    found: dict[str, set[int]] = {}
    for pid, title in dovecot.imap_processes().items():
        match = _TITLE.search(title)
        if match and (not idle_only or (match.group(3) or "").startswith("IDLE")):
            found.setdefault(match.group(1), set()).add(pid)
    return found


def idle_sessions(dovecot: DovecotServer) -> Counter[str]:
    """Mailbox user -> its sessions in IDLE right now (Dovecot's process titles)."""
    return Counter({user: len(pids) for user, pids in idle_processes(dovecot).items()})


def all_sessions(dovecot: DovecotServer) -> Counter[str]:
    """Mailbox user -> its logged-in IMAP sessions, whatever they do."""
    counts: Counter[str] = Counter()
    for title in dovecot.process_titles():
        match = _TITLE.search(title)
        if match:
            counts[match.group(1)] += 1
    return counts


class Watchers:
    """Samples Dovecot's IDLE sessions in the background (every ``interval`` s) and
    remembers every time a mailbox had more than one at once."""

    def __init__(self, dovecot: DovecotServer, interval: float = timing.SAMPLE) -> None:
        self._dovecot = dovecot
        self._interval = interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.latest: Counter[str] = Counter()
        self.doubles: list[tuple[float, str, int]] = []
        self.samples = 0
        self._thread = threading.Thread(target=self._run, name="watchers", daemon=True)

    def start(self) -> Watchers:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                counts = idle_sessions(self._dovecot)
            except Exception:  # the server restarting between two reads: skip the sample
                counts = None
            if counts is not None:
                with self._lock:
                    self.latest = counts
                    self.samples += 1
                    now = time.monotonic()
                    self.doubles += [(now, u, n) for u, n in counts.items() if n > 1]
            self._stop.wait(self._interval)

    def now(self) -> Counter[str]:
        """A fresh sample (not the background one)."""
        return idle_sessions(self._dovecot)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=timing.THREAD_JOIN)

    def assert_never_twice(self) -> None:
        with self._lock:
            assert self.doubles == [], f"mailboxes in IDLE twice at once: {self.doubles[:10]}"


# --- one test's world -------------------------------------------------------------------


@dataclass
class Account:
    account_id: str
    box: DovecotUser
    delivered: int = 0

    @property
    def user(self) -> str:
        return self.box.name


@dataclass
class Fleet:
    root: Path
    dovecot: DovecotServer
    redis: RedisServer
    database_url: str
    worker_settings: dict[str, str]
    app: App = field(init=False)
    tenant: str = field(init=False)
    admin: User = field(init=False)
    owner: User = field(init=False)
    workers: list[Worker] = field(default_factory=list)
    accounts: list[Account] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.blob_dir = self.root / "blobs"
        self.master_key = base64.b64encode(secrets.token_bytes(32)).decode()
        self.app = bootstrap(
            database_url=self.database_url,
            redis_url=self.redis.url,
            blob_dir=self.blob_dir,
            master_key=self.master_key,
            project_inline=False,
            allow_private_hosts=True,
        )
        self.tenant = "t-" + uuid.uuid4().hex[:8]
        self.admin = User("admin-" + self.tenant, self.tenant, frozenset({"TenantAdmin"}))
        self.owner = User("owner-" + self.tenant, self.tenant, frozenset({"TenantMember"}))

    # -- accounts and mail --

    def member(self, name: str) -> User:
        return User(f"{name}-{self.tenant}", self.tenant, frozenset({"TenantMember"}))

    def mailbox(self) -> DovecotUser:
        return self.dovecot.add_user("u" + uuid.uuid4().hex[:10], secrets.token_urlsafe(12))

    def connect(
        self, owner: User | None = None, *, port: int | None = None, messages: int = 0
    ) -> Account:
        """A new mailbox (with ``messages`` already in it) connected as ``owner``'s own
        account, or as a shared one (``owner`` None, by the tenant admin)."""
        box = self.mailbox()
        account = Account("", box)
        if messages:
            self.deliver(account, messages)
        payload = {
            "provider": "imap",
            "displayName": f"Box {box.name}",
            "address": f"{box.name}@mailbox.example",
            "scope": "user" if owner is not None else "shared",
            "authMethod": "password",
            "imap": {
                "host": self.dovecot.host,
                "port": port or self.dovecot.port,
                "security": "none",
                "username": box.name,
            },
            "secret": box.password,
        }
        data = ok(self.app.write("connect-mail-account", payload, owner or self.admin))
        account.account_id = data["accountId"]
        self.accounts.append(account)
        return account

    def write(self, handler: str, payload: dict[str, Any], user: User | None = None) -> None:
        ok(self.app.write(handler, payload, user or self.admin))

    def deliver(self, account: Account, count: int = 1, *, imap: bool = False) -> None:
        """New mail: through IMAP APPEND (``imap``) or as maildir files (no login)."""
        raws = [make_message(account.delivered + i) for i in range(count)]
        if imap:
            self.dovecot.imap_append(account.box, raws)
        else:
            self.dovecot.deliver(account.box, raws)
        account.delivered += count

    def message_counts(self) -> dict[str, int]:
        """Account id -> messages listed by the read model (after a catch-up)."""
        self.app.projections.catch_up()
        counts: dict[str, int] = {}
        for account in self.accounts:
            items: list[dict[str, Any]] = []
            cursor = None
            while True:
                data = ok(
                    self.app.query(
                        "list-messages",
                        {"accountId": account.account_id, "limit": 100, "cursor": cursor},
                        self.admin,
                    )
                )
                items += data["items"]
                cursor = data["nextCursor"]
                if cursor is None:
                    break
            assert len({i["messageId"] for i in items}) == len(items), "a message listed twice"
            counts[account.account_id] = len(items)
        return counts

    def ingested_events(self) -> int:
        """MessageIngested events in the store; fails if a message has two."""
        store: Any = self.app.ctx.store
        streams: Counter[str] = Counter()
        position = 0
        while batch := store.read_raw(position, 1000):
            streams.update(str(n.originator_id) for n in batch if n.topic == INGESTED)
            position = batch[-1].id
        twice = [m for m, n in streams.items() if n > 1]
        assert twice == [], f"messages ingested more than once: {twice[:5]}"
        return sum(streams.values())

    def all_ingested(self) -> bool:
        counts = self.message_counts()
        return all(counts[a.account_id] == a.delivered for a in self.accounts)

    # -- workers --

    def start_worker(self, name: str | None = None, **settings: str) -> Worker:
        name = name or f"w{len(self.workers) + 1}"
        port = free_port()
        env = cli_env(
            database_url=self.database_url,
            redis_url=self.redis.url,
            blob_dir=str(self.blob_dir),
            master_key=self.master_key,
            **{**self.worker_settings, **settings},
        )
        log_path = self.root / f"worker-{name}.log"
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                command(
                    "worker", "--worker-id", name, "--metrics-port", str(port), "--projections"
                ),
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        worker = Worker(name, proc, port, log_path)
        self.workers.append(worker)
        return worker

    def start_workers(self, count: int, **settings: str) -> list[Worker]:
        started = [self.start_worker(**settings) for _ in range(count)]
        self.wait_ready(started)
        return started

    def wait_ready(self, workers: Iterable[Worker], timeout: float = timing.WORKERS_READY) -> None:
        """Every worker answers /healthz and listens for signals."""
        workers = list(workers)

        def ready() -> bool:
            for w in workers:
                assert w.alive, f"worker {w.name} exited {w.proc.returncode}:\n{w.log()[-3000:]}"
            return all(w.healthy() for w in workers) and self.redis.subscribers() >= sum(
                w.alive for w in self.workers
            )

        wait_for("workers to be ready", ready, timeout=timeout, interval=timing.SAMPLE)

    def user_active(self, user: User | None = None) -> None:
        self.write("user-active", {}, user or self.owner)

    def settle(
        self, watchers: Watchers, accounts: list[Account], timeout: float = timing.SETTLE
    ) -> float:
        """Wait until ``accounts`` are each in IDLE once and the workers' shares (their
        /healthz ``accountsOwned``) hold still for two fleet ticks: a worker that started
        first may have claimed everything and be handing some back. Seconds it took."""

        def shares() -> list[int]:
            return [w.healthz()[1]["accountsOwned"] for w in self.workers if w.alive]

        def settled() -> bool:
            if not self.watched(watchers, accounts):
                return False
            first = shares()
            time.sleep(timing.SETTLE_HOLD)
            return (
                sum(first) == len(accounts)
                and shares() == first
                and self.watched(watchers, accounts)
            )

        return wait_for("the fleet to settle", settled, timeout)

    def watched(self, watchers: Watchers, accounts: Iterable[Account] | None = None) -> bool:
        """Each of these accounts has exactly one session in IDLE right now."""
        counts = watchers.now()
        return all(counts[a.user] == 1 for a in accounts or self.accounts)

    def events(self, event: str, since: float, **fields: str) -> list[LogEvent]:
        """The workers' ``event`` log lines after unix time ``since`` matching ``fields``
        (log times are cut to the millisecond: an event in the same millisecond counts)."""
        since = math.floor(since * 1000) / 1000
        return sorted(
            (
                e
                for w in self.workers
                for e in w.events()
                if e.event == event
                and e.at >= since
                and all(e.fields.get(k) == v for k, v in fields.items())
            ),
            key=lambda e: e.at,
        )

    def delays(
        self, event: str, since: float, accounts: Iterable[Account], **fields: str
    ) -> dict[str, float]:
        """Per account: seconds from ``since`` to its first ``event`` (fails if it has none).
        A worker logs an event a moment after the server shows its effect (a session's
        IDLE is on the server's process title before the worker has read "+ idling"), so
        a missing line is looked for again for up to ``timing.LOG_GRACE`` s; the delays come
        from the lines' own times, not from when they were read."""
        found: dict[str, float] = {}
        deadline = time.monotonic() + timing.LOG_GRACE
        for account in accounts:
            while not (hits := self.events(event, since, account_id=account.account_id, **fields)):
                if time.monotonic() > deadline:
                    break
                time.sleep(timing.LOG_POLL)
            assert hits, f"no {event} {fields} for {account.account_id} in the workers' logs"
            found[account.account_id] = hits[0].at - since
        return found

    def dovecot_logins(self, since: int = 0) -> Counter[str]:
        """User -> successful IMAP logins in Dovecot's log after byte offset ``since``."""
        text = self.dovecot.log_path.read_bytes()[since:].decode(errors="replace")
        return Counter(re.findall(r"imap-login: Info: Login: user=<([^>]+)>", text))

    def log_offset(self) -> int:
        return self.dovecot.log_path.stat().st_size

    # -- teardown --

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.app.close()

    def logs(self) -> str:
        parts = [f"--- {w.name} ---\n{w.log()[-6000:]}" for w in self.workers]
        with contextlib.suppress(Exception):
            parts.append(f"--- dovecot ---\n{self.dovecot.log_text()[-4000:]}")
        return "\n".join(parts)


def stop_gracefully(worker: Worker, timeout: float) -> float:
    """SIGTERM; the seconds until the process exited (fails past ``timeout``)."""
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    try:
        worker.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"worker {worker.name} still running {timeout}s after SIGTERM"
        ) from None
    return time.monotonic() - started
