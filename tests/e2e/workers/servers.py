"""Private servers for the worker end-to-end tests, so a test can kill and restart them
without disturbing anyone else: ``RedisServer`` (a redis-server of its own on a free
port, no persistence) and ``PostgresCluster`` (a PostgreSQL 15 cluster initdb'ed into a
temp dir owned by ``postgres``, trust auth, loopback only). ``wait_for`` is the bounded
wait every test uses: it fails with what it saw last."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import redis

from infrastructure.devkit.processes import free_port
from tests.e2e import timing

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SIGNAL_CHANNEL = "tidings:signals"


def wait_for(
    what: str,
    condition: Callable[[], Any],
    timeout: float,
    interval: float = timing.POLL_STEP,
) -> float:
    """Poll ``condition`` until truthy; the seconds it took. Fails after ``timeout``."""
    started = time.monotonic()
    last: Any = None
    while True:
        last = condition()
        elapsed = time.monotonic() - started
        if last:
            return elapsed
        if elapsed > timeout:
            raise AssertionError(f"timed out after {timeout:.0f}s: {what} (last: {last})")
        time.sleep(interval)


class RedisServer:
    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self._log = root / f"redis-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> RedisServer:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        argv += ["--logfile", str(self._log)]
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
        )
        wait_for(
            "redis to answer PING",
            self._pings,
            timeout=timing.SERVER_START,
            interval=timing.FAST_POLL,
        )
        return self

    def _pings(self) -> bool:
        try:
            with redis.Redis(
                port=self.port, socket_timeout=timing.PING, socket_connect_timeout=timing.PING
            ) as c:
                return bool(c.ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        """SIGKILL: Redis is gone at once, with everything it held."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=timing.PROCESS_EXIT)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=timing.SERVER_STOP)
            except subprocess.TimeoutExpired:
                self.kill()

    def client(self) -> redis.Redis:
        return redis.Redis(
            port=self.port,
            socket_timeout=timing.CLIENT,
            socket_connect_timeout=timing.CLIENT,
            decode_responses=True,
        )

    def subscribers(self) -> int:
        with self.client() as c:
            answer: list[Any] = c.pubsub_numsub(SIGNAL_CHANNEL)
            return int(answer[0][1])


class PostgresCluster:
    """A private cluster: ``start``/``stop`` at will; ``destroy`` removes it."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tpg-", dir="/tmp"))
        shutil.chown(self.root, "postgres", "postgres")
        self.data = self.root / "data"
        self.port = free_port()

    def _as_postgres(self, *argv: str, timeout: float = timing.SERVER_COMMAND) -> None:
        result = subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {result.stdout}{result.stderr}")

    def init(self) -> PostgresCluster:
        self._as_postgres(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "-E", "UTF8", "--no-sync", "--no-instructions",
        )  # fmt: skip
        return self

    def start(self) -> PostgresCluster:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "pg.log"),
            "-w", "-t", str(int(timing.PG_START)), "-o", options, "start",
        )  # fmt: skip
        return self

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, schema: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres?schema={schema}"


def running_cluster() -> Iterator[PostgresCluster]:
    """A started private cluster for a fixture to yield; removed afterwards."""
    pg = PostgresCluster()
    try:
        pg.init().start()
        yield pg
    finally:
        pg.destroy()


def drop_schema(dsn: str, schema: str) -> None:
    with contextlib.suppress(psycopg.Error), psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
