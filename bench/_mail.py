"""Shared helpers of the mail benchmarks (``ingest.py``, ``watch.py``): a seeded corpus of
mixed messages, a private Dovecot and Redis, apps wired like a worker's, child processes
that are always cleaned up, RSS readings, the server's view of IDLE sessions, and the
report table (with a free-form ratio-or-delta column).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from application import User
from application.app import App
from infrastructure.bootstrap import bootstrap
from infrastructure.devkit.dovecot import DovecotServer, DovecotUser
from infrastructure.runtime.settings import Settings

REPO = Path(__file__).resolve().parents[1]
MASTER_KEY = base64.b64encode(b"tidings-bench-master-key-32bytes").decode()
ADMIN = frozenset({"TenantAdmin"})


def admin(tenant: str, user_id: str = "bench-admin") -> User:
    return User(id=user_id, tenant_id=tenant, roles=ADMIN)


# --- the corpus ---------------------------------------------------------------------------

_WORDS = (
    "invoice meeting schedule project update quarterly report budget review team "
    "customer order shipment delivery contract renewal proposal draft final agenda "
    "notes follow-up question answer thanks regards tomorrow friday deadline release "
    "server deploy incident ticket support account password reset newsletter offer"
).split()
_NAMES = [
    "Alice Martin",
    "Bob Chen",
    "Chloé Durand",
    "Dmitri Ivanov",
    "Eva Müller",
    "François Petit",
    "Grace Hopper",
    "Hiro Tanaka",
    "Inès Garcia",
    "Jonas Berg",
]
_DOMAINS = ["example.com", "example.org", "mail.example.net", "corp.example", "shop.example"]
_TAIL = "\r\n"


def _addr(rng: random.Random) -> tuple[str, str]:
    name = rng.choice(_NAMES)
    local = name.split()[0].lower().encode("ascii", "ignore").decode() or "user"
    return name, f"{local}.{rng.randint(1, 999)}@{rng.choice(_DOMAINS)}"


def _fmt(name: str, address: str) -> str:
    if name.isascii():
        return f'"{name}" <{address}>'
    encoded = base64.b64encode(name.encode()).decode()
    return f"=?utf-8?b?{encoded}?= <{address}>"


def _text(rng: random.Random, size: int) -> str:
    lines, total = [], 0
    while total < size:
        line = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 13))).capitalize() + "."
        lines.append(line)
        total += len(line) + 2
    return _TAIL.join(lines)


def _qp_latin(rng: random.Random, size: int) -> str:
    """Quoted-printable latin-1 text (accents as =E9 and the like)."""
    body = _text(rng, size).replace("e ", "=E9 ").replace("a ", "=E0 ")
    return body


def _headers(i: int, rng: random.Random, when: datetime, extra: Sequence[str] = ()) -> list[str]:
    sender = _addr(rng)
    to = [_addr(rng) for _ in range(rng.randint(1, 3))]
    cc = [_addr(rng) for _ in range(rng.randint(0, 2))]
    subject = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 7))).capitalize()
    if i % 7 == 0:
        subject = "=?utf-8?q?R=C3=A9union_" + subject.replace(" ", "_") + "?="
    head = [
        f"Message-ID: <{i}.{rng.getrandbits(48):x}@bench.example>",
        f"Date: {format_datetime(when)}",
        f"From: {_fmt(*sender)}",
        f"To: {', '.join(_fmt(*a) for a in to)}",
    ]
    if cc:
        head.append(f"Cc: {', '.join(_fmt(*a) for a in cc)}")
    head.append(f"Subject: {subject}")
    if i % 5 == 0 and i > 10:  # replies: a thread with an earlier message
        parent = f"<{i - rng.randint(1, 10)}.ref@bench.example>"
        head += [f"In-Reply-To: {parent}", f"References: {parent}"]
    head += [
        "Received: from mx.example.net (mx.example.net [192.0.2.10]) by mail.bench.example"
        f" with ESMTPS id {rng.getrandbits(40):x}; {format_datetime(when)}",
        "Authentication-Results: mx.bench.example; spf=pass smtp.mailfrom=example.com;"
        " dkim=pass header.d=example.com; dmarc=pass header.from=example.com",
        f"X-Mailer: BenchMail {rng.randint(1, 9)}.{rng.randint(0, 9)}",
        "MIME-Version: 1.0",
        *extra,
    ]
    return head


def _plain(i: int, rng: random.Random, when: datetime, size: int) -> str:
    if i % 3 == 0:
        head = _headers(
            i,
            rng,
            when,
            [
                "Content-Type: text/plain; charset=iso-8859-1",
                "Content-Transfer-Encoding: quoted-printable",
            ],
        )
        body = _qp_latin(rng, size)
    else:
        head = _headers(
            i,
            rng,
            when,
            ["Content-Type: text/plain; charset=utf-8", "Content-Transfer-Encoding: 8bit"],
        )
        body = _text(rng, size)
    return _TAIL.join(head) + _TAIL * 2 + body + _TAIL


def _alternative(i: int, rng: random.Random, when: datetime, size: int) -> str:
    boundary = f"alt-{rng.getrandbits(64):x}"
    text = _text(rng, size // 3)
    html = (
        "<html><head><style>p{margin:0}</style></head><body>"
        + "".join(f"<p>{line}</p>" for line in _text(rng, size // 2).split(_TAIL))
        + "</body></html>"
    )
    head = _headers(i, rng, when, [f'Content-Type: multipart/alternative; boundary="{boundary}"'])
    parts = [
        f"--{boundary}",
        "Content-Type: text/plain; charset=utf-8",
        "",
        text,
        f"--{boundary}",
        "Content-Type: text/html; charset=utf-8",
        "",
        html,
        f"--{boundary}--",
        "",
    ]
    return _TAIL.join(head) + _TAIL * 2 + _TAIL.join(parts)


def _attachment(i: int, rng: random.Random, when: datetime, size: int) -> str:
    boundary = f"mix-{rng.getrandbits(64):x}"
    payload = base64.encodebytes(rng.randbytes(size * 2 // 3)).decode().replace("\n", _TAIL)
    name = rng.choice(["report.pdf", "photo.jpg", "data.xlsx", "invoice.pdf"])
    head = _headers(i, rng, when, [f'Content-Type: multipart/mixed; boundary="{boundary}"'])
    parts = [
        f"--{boundary}",
        "Content-Type: text/plain; charset=utf-8",
        "",
        _text(rng, size // 5),
        f"--{boundary}",
        f'Content-Type: application/octet-stream; name="{name}"',
        f'Content-Disposition: attachment; filename="{name}"',
        "Content-Transfer-Encoding: base64",
        "",
        payload.rstrip(),
        f"--{boundary}--",
        "",
    ]
    return _TAIL.join(head) + _TAIL * 2 + _TAIL.join(parts)


def _malformed(i: int, rng: random.Random, when: datetime, size: int) -> bytes:
    kind = i % 4
    if kind == 0:  # multipart without its closing boundary, bad base64
        boundary = "broken"
        head = _headers(i, rng, when, [f'Content-Type: multipart/mixed; boundary="{boundary}"'])
        body = (
            f"--{boundary}{_TAIL}Content-Type: text/plain{_TAIL}"
            f"Content-Transfer-Encoding: base64{_TAIL}{_TAIL}"
            f"@@@not-base64@@@{_TAIL}{_text(rng, size)}{_TAIL}"
        )
        return (_TAIL.join(head) + _TAIL * 2 + body).encode()
    if kind == 1:  # 8-bit latin-1 bytes in headers, an unknown charset
        head = _headers(i, rng, when, ["Content-Type: text/plain; charset=x-bogus-charset"])
        raw = (_TAIL.join(head) + _TAIL * 2 + _text(rng, size) + _TAIL).encode()
        return raw.replace(b"Subject: ", b"Subject: Caf\xe9 cr\xe8me ", 1)
    if kind == 2:  # no From, no Date, a broken encoded word
        head = [h for h in _headers(i, rng, when) if not h.startswith(("From:", "Date:"))]
        head.append("X-Note: =?utf-8?b?!!!?=")
        # Without Date the fingerprint needs something unique: the Message-ID is kept.
        return (_TAIL.join(head) + _TAIL * 2 + _text(rng, size) + _TAIL).encode()
    # a header line without a colon, a bad Date
    head = _headers(i, rng, when)
    head = [("Date: not a date at all" if h.startswith("Date:") else h) for h in head]
    head.insert(3, "this line is not a header")
    return (_TAIL.join(head) + _TAIL * 2 + _text(rng, size) + _TAIL).encode()


def corpus(count: int, *, seed: int = 7, size: int = 4096) -> list[bytes]:
    """``count`` mixed messages of about ``size`` bytes each (CRLF, deterministic): ~48%
    text/plain (utf-8 8bit or latin-1 quoted-printable), ~32% multipart/alternative with
    HTML, ~17% multipart/mixed with a base64 attachment, ~3% malformed (several kinds)."""
    rng = random.Random(seed)
    start = datetime.now(UTC) - timedelta(days=10)
    out: list[bytes] = []
    for i in range(count):
        when = start + timedelta(seconds=i * 37)  # distinct dates: distinct fingerprints
        target = int(size * rng.uniform(0.55, 1.0))
        pick = rng.random()
        if pick < 0.03:
            out.append(_malformed(i, rng, when, target))
            continue
        if pick < 0.51:
            text = _plain(i, rng, when, target)
        elif pick < 0.83:
            text = _alternative(i, rng, when, target)
        else:
            text = _attachment(i, rng, when, target)
        out.append(text.encode())
    return out


def big_message(size: int, *, seed: int = 3) -> bytes:
    """One message of exactly ``size`` bytes: a short text part and a base64 attachment."""
    rng = random.Random(seed)
    when = datetime.now(UTC) - timedelta(hours=1)
    boundary = "big-boundary"
    head = _headers(1, rng, when, [f'Content-Type: multipart/mixed; boundary="{boundary}"'])
    start = (
        _TAIL.join(head)
        + _TAIL * 2
        + f"--{boundary}{_TAIL}Content-Type: text/plain; charset=utf-8{_TAIL}{_TAIL}"
        + "The attachment is the quarterly archive."
        + _TAIL
        + f'--{boundary}{_TAIL}Content-Type: application/zip; name="a.zip"{_TAIL}'
        + f"Content-Transfer-Encoding: base64{_TAIL}{_TAIL}"
    ).encode()
    end = f"{_TAIL}--{boundary}--{_TAIL}".encode()
    line = base64.b64encode(rng.randbytes(57)) + b"\r\n"  # 78 bytes a line
    fill = size - len(start) - len(end)
    body = line * (fill // len(line))
    body += b"A" * (fill - len(body))
    return start + body + end


def mail(n: int, subject: str, *, tag: str = "bench") -> bytes:
    """A small CRLF text/plain message with a unique Message-ID and Date."""
    when = datetime.now(UTC)
    return (
        f"Message-ID: <{n}.{uuid.uuid4().hex}@{tag}.example>\r\n"
        f"Date: {format_datetime(when)}\r\n"
        f"From: Sender {n} <sender{n}@origin.example>\r\n"
        "To: Box <box@bench.example>\r\n"
        f"Subject: {subject}\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        f"Hello {n}, this is message {subject}.\r\n"
    ).encode()


def stage(box: DovecotUser, raw: bytes, n: int) -> tuple[Path, Path]:
    """Write a message into the maildir's ``tmp/`` (as an MDA does first); renaming the
    first path to the second delivers it (``new/``): a burst of renames is a burst of mail
    arriving at once, without the writes in the timed part."""
    base = f"{int(time.time())}.M{n:09d}P{os.getpid()}.bench,S={len(raw)}"
    tmp = box.maildir / "tmp" / base
    tmp.write_bytes(raw)
    os.chown(tmp, box.uid, box.gid)
    tmp.chmod(0o600)
    return tmp, box.maildir / "new" / base


# --- servers ------------------------------------------------------------------------------


def dovecot_extra(sessions: int) -> str:
    """Limits for ``sessions`` concurrent IMAP sessions (DOVECOT.md: process_limit,
    client limits, per-user/IP connections); a later ``service`` block overrides.

    IDLE re-checks the mailbox every 30 s besides inotify, Dovecot's default, not the
    tests' 1 s fallback: 2,000 idle sessions each waking every second used 0.38 s of CPU
    every 5 s on this machine (0.03 s at 30 s), which a burst then shared the cores with.
    Push itself comes by inotify (limits raised by ``raise_inotify``)."""
    limit = max(2000, sessions + 500)
    return f"""
mailbox_idle_check_interval = 30 secs
default_process_limit = {limit}
default_client_limit = {limit * 4}
mail_max_userip_connections = {limit}
service imap {{
  process_limit = {limit}
}}
service imap-login {{
  process_limit = {limit}
}}
service stats {{
  client_limit = {limit * 4}
}}
service anvil {{
  client_limit = {limit * 4}
}}
service auth {{
  client_limit = {limit * 4}
}}
"""


def raise_inotify(instances: int) -> str:
    """Raise ``fs.inotify.max_user_instances`` when below ``instances`` (root only); say
    what it is now."""
    path = Path("/proc/sys/fs/inotify/max_user_instances")
    try:
        current = int(path.read_text())
    except (OSError, ValueError):
        return "unknown"
    if current < instances:
        with contextlib.suppress(OSError):
            path.write_text(str(instances))
            current = int(path.read_text())
    return str(current)


@contextlib.contextmanager
def private_dovecot(sessions: int = 100) -> Iterator[DovecotServer]:
    with DovecotServer(extra_config=dovecot_extra(sessions)) as server:
        yield server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own on loopback (pub/sub channels are server-wide: a shared
    Redis would carry other runs' signals into our workers). Falls back to
    ``TIDINGS_BENCH_REDIS`` / 127.0.0.1:6379 db 9 when redis-server is missing."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield os.environ.get("TIDINGS_BENCH_REDIS", "redis://127.0.0.1:6379/9")
        return
    workdir = Path(tempfile.mkdtemp(prefix="tidings-redis-"))
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--maxclients",
            "20000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# --- apps and accounts --------------------------------------------------------------------


def settings_for(database_url: str, blob_dir: Path, **overrides: Any) -> Settings:
    return Settings(
        database_url=database_url,
        blob_dir=blob_dir,
        master_key=MASTER_KEY,
        project_inline=False,
        allow_private_hosts=True,  # the bench's Dovecot is on loopback
        **overrides,
    )


def open_app(settings: Settings) -> App:
    return bootstrap(settings)


def connect_payload(
    server: DovecotServer, box: DovecotUser, scope: str = "shared"
) -> dict[str, Any]:
    return {
        "provider": "imap",
        "displayName": f"Box {box.name}",
        "address": f"{box.name}@bench.example",
        "scope": scope,
        "authMethod": "password",
        "imap": {
            "host": server.host,
            "port": server.port,
            "security": "none",
            "username": box.name,
        },
        "secret": box.password,
    }


def connect(
    app: App, user: User, server: DovecotServer, box: DovecotUser, scope: str = "shared"
) -> str:
    result = app.write("connect-mail-account", connect_payload(server, box, scope), user)
    if not result.is_success or result.data is None:
        raise RuntimeError(f"connect-mail-account failed: {result.error}")
    return str(result.data["accountId"])


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a ``tidings worker`` child with these settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDINGS_")}
    env.update(
        TIDINGS_DATABASE_URL=settings.database_url,
        TIDINGS_BLOB_DIR=str(settings.blob_dir),
        TIDINGS_MASTER_KEY=MASTER_KEY,
        TIDINGS_ALLOW_PRIVATE_HOSTS="true",
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    if settings.redis_url:
        env["TIDINGS_REDIS_URL"] = settings.redis_url
    env.update(extra)
    return env


def worker_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "infrastructure.cli", "worker", *args]


# --- processes ----------------------------------------------------------------------------


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL of this one child (its own process group) after ``timeout``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@dataclass
class Finished:
    returncode: int
    max_rss_kib: int
    seconds: float
    stdout: str
    stderr: str
    hwm_kib: int = 0  # the largest VmHWM polled while it ran (a cross-check)


# Runs argv[2:] as its child and writes the child's exit code and peak RSS (JSON) to the
# file argv[1]. The peak must be taken in a small process: a child forked straight from
# this (big) bench process counts the pages it shared with it before exec in ru_maxrss.
_LAUNCHER = """
import json, resource, subprocess, sys
code = subprocess.call(sys.argv[2:])
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as report:
    json.dump({"code": code, "maxrss": usage.ru_maxrss}, report)
"""


def run_measured(argv: Sequence[str], env: Mapping[str, str], timeout: float = 600) -> Finished:
    """Run a command to completion: its peak RSS (KiB) from ``getrusage(RUSAGE_CHILDREN)``
    in a small launcher process, and, as a cross-check, the largest VmHWM seen while it
    ran (polled every 10 ms)."""
    with (
        tempfile.TemporaryDirectory(prefix="tidings-run-") as tmp,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        report = Path(tmp) / "report.json"
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(report), *argv],
            env=dict(env),
            cwd=REPO,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        hwm = 0
        try:
            while proc.poll() is None:
                for child in _children(proc.pid):
                    hwm = max(hwm, proc_status(child).get("VmHWM", 0))
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{list(argv)[3:]} still running after {timeout}s")
                time.sleep(0.01)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        seconds = time.perf_counter() - started
        measured: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
        out.seek(0)
        err.seek(0)
        return Finished(
            int(measured["code"]) if "code" in measured else (proc.returncode or -1),
            int(measured.get("maxrss", 0)),
            seconds,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            hwm,
        )


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(c) for c in text.split()]
    return []


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM / Threads of a live process (KiB for the memory lines)."""
    values: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                values[key] = int(rest.split()[0])
    return values


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used (0 when it is gone)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """CPU seconds used so far by each live process: pid -> (executable name, seconds).
    From ``schedstat`` (nanoseconds on a CPU): ``stat``'s tick samples miss most of
    the short wake-ups of thousands of Dovecot session processes."""
    used: dict[int, tuple[str, float]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            name = (proc / "comm").read_text().strip()
            used[int(proc.name)] = (name, int((proc / "schedstat").read_text().split()[0]) / 1e9)
    return used


def cpu_by_program(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds each program (e.g. ``imap``: Dovecot's sessions) used between two
    ``cpu_by_process`` samples; a process that started between them counts whole."""
    used: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        used[name] = used.get(name, 0.0) + seconds - before.get(pid, (name, 0.0))[1]
    return used


def cpu_of(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], pids: Iterable[int]
) -> float:
    """CPU seconds these processes used between two ``cpu_by_process`` samples (a process
    that started between them counts whole)."""
    used = 0.0
    for pid in set(pids) & after.keys():
        used += after[pid][1] - (before[pid][1] if pid in before else 0.0)
    return used


def socket_ports(pids: Iterable[int], remote_port: int) -> set[int]:
    """Local ports of these processes' TCP connections to ``remote_port``: their socket
    inodes (``/proc/PID/fd``) found in the kernel's TCP tables."""
    inodes: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes and int(fields[2].rsplit(":", 1)[1], 16) == remote_port:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def backends_of(conn: Any, pids: Iterable[int]) -> set[int]:
    """The PostgreSQL backends serving these processes' connections (matched by client
    port): their CPU told from that of others sharing the server."""
    ports = sorted(socket_ports(pids, conn.info.port))
    rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)", (ports,))
    return {int(row[0]) for row in rows.fetchall()}


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (total - idle) / tick, total / tick


def open_fds(pid: int) -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/fd"))
    return -1


# --- the server's view of sessions --------------------------------------------------------

_TITLE = re.compile(r"dovecot/imap \[(\S+) [0-9.]+ ([^\]]*)\]")


def idle_users(server: DovecotServer) -> dict[str, int]:
    """Users with IMAP sessions in IDLE right now, and how many each (process titles)."""
    found: dict[str, int] = {}
    for title in server.process_titles():
        match = _TITLE.search(title)
        if match and match.group(2).strip().upper().startswith("IDLE"):
            found[match.group(1)] = found.get(match.group(1), 0) + 1
    return found


def wait_until(
    check: Any, timeout: float, interval: float = 0.05, what: str = "condition"
) -> float:
    """Poll ``check()`` until true; the seconds it took. TimeoutError past ``timeout``."""
    started = time.monotonic()
    while True:
        if check():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what} not reached within {timeout:.0f}s")
        time.sleep(interval)


# --- report -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    measurement: str
    backend: str
    tidings: str
    reference: str  # the baseline or the floor
    compare: str  # a ratio or a delta
    goal: str
    passed: bool | None  # None: informational, no goal


def report(
    title: str,
    lines: Sequence[Line],
    header: Sequence[str],
    notes: Sequence[str] = (),
    reference: str = "baseline / floor",
) -> None:
    out = Console(width=max(140, Console().width))
    for text in header:
        out.print(text, highlight=False)
    table = Table(title=title, title_justify="left")
    for column, justify in (
        ("measurement", "left"),
        ("backend", "left"),
        ("tidings", "right"),
        (reference, "right"),
        ("ratio / delta", "right"),
        ("goal", "left"),
        ("result", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for line in lines:
        verdict = (
            "-" if line.passed is None else ("[green]PASS[/]" if line.passed else "[red]FAIL[/]")
        )
        table.add_row(
            line.measurement,
            line.backend,
            line.tidings,
            line.reference,
            line.compare,
            line.goal,
            verdict,
        )
    out.print(table)
    for note in notes:
        out.print(note, highlight=False)
