"""A webhook delivery process killed with its attempts in flight: how long until
another process has delivered every one of them.

``--items`` webhooks (one delivery each, so each is the head of its own order and all
are in flight at once), spread over tenants so no per-tenant or per-host cap holds
them back. A first ``tidings webhooks run`` claims them all; the loopback receiver
holds every first attempt (it never answers in time); when all are in flight the
process is killed with SIGKILL and a second one is started. Measured: from the kill
to the last second attempt received (goal ≤ 10 s); the lease ttl is the default
(``TIDINGS_WEBHOOK_LEASE_TTL``) unless ``--ttl`` says otherwise. The baseline column
is the ttl itself: the earliest a claim can come back.

    python bench/webhook_kill.py                  # 200 in flight, both backends
    python bench/webhook_kill.py --items 50 --backend sqlite
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import (  # noqa: E402
    BACKENDS,
    Backend,
    Row,
    admin_of,
    environment,
    render,
    say,
    scratch_database,
)
from infrastructure.bootstrap import bootstrap  # noqa: E402
from infrastructure.runtime.settings import Settings  # noqa: E402

MASTER_KEY = base64.b64encode(b"tidings-bench-hook-kill-32-bytes").decode()
PER_TENANT = 8  # webhooks per tenant: the default per-tenant cap of a pool


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True


class Receiver:
    """Counts first and later attempts; a first attempt is held until ``release``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first = 0
        self.again = 0
        self.last_again = 0.0
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                first = self.headers.get("Tidings-Delivery-Attempt") == "1"
                with receiver.lock:
                    if first:
                        receiver.first += 1
                    else:
                        receiver.again += 1
                        receiver.last_again = time.monotonic()
                if first:
                    receiver.release.wait(120)
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:  # the killed process's connection is gone
                    pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return self.first, self.again

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()


def _wait(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def run(backend: Backend, args: argparse.Namespace) -> Row:
    with scratch_database(backend, "hookkill") as scratch:
        app = bootstrap(
            database_url=scratch.url,
            blob_dir=scratch.workdir / "blobs",
            master_key=MASTER_KEY,
            allow_private_hosts=True,
            project_inline=False,
        )
        receiver = Receiver()
        tenants = [f"hk-{n}" for n in range((args.items + PER_TENANT - 1) // PER_TENANT)]
        for n in range(args.items):
            admin = admin_of(tenants[n // PER_TENANT])
            app.write("create-webhook", {"url": receiver.url, "events": ["*"]}, admin)
        for tenant in tenants:  # one feed item per tenant: one delivery per webhook
            app.write(
                "define-tenant-field",
                {"entityName": "contact", "fieldKey": "k", "field": {"type": "text"}},
                admin_of(tenant),
            )
        app.projections.catch_up()
        app.close()
        ttl = args.ttl or Settings.model_fields["webhook_lease_ttl"].default
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDINGS_")}
        env.update(
            TIDINGS_DATABASE_URL=scratch.url,
            TIDINGS_BLOB_DIR=str(scratch.workdir / "blobs"),
            TIDINGS_MASTER_KEY=MASTER_KEY,
            TIDINGS_ALLOW_PRIVATE_HOSTS="true",
            TIDINGS_WEBHOOK_POOL=str(max(args.items * 2, 32)),
            TIDINGS_WEBHOOK_PER_TENANT=str(PER_TENANT),
            TIDINGS_WEBHOOK_PER_HOST=str(PER_TENANT),
            TIDINGS_WEBHOOK_TIMEOUT="60",
            PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        if args.ttl:
            env["TIDINGS_WEBHOOK_LEASE_TTL"] = str(args.ttl)

        def start(name: str) -> subprocess.Popen[bytes]:
            argv = [sys.executable, "-m", "infrastructure.cli", "webhooks", "run"]
            return subprocess.Popen(
                [*argv, "--worker-id", name, "--no-projections"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

        say(f"{backend}: {args.items} webhooks in {len(tenants)} tenants, ttl {ttl:g} s")
        doomed = start("doomed")
        heir = None
        try:
            if not _wait(lambda: receiver.counts()[0] >= args.items, 120):
                raise RuntimeError(f"only {receiver.counts()[0]} in flight")
            doomed.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            doomed.wait(30)
            heir = start("heir")
            if not _wait(lambda: receiver.counts()[1] >= args.items, 120):
                raise RuntimeError(f"only {receiver.counts()[1]} delivered after the kill")
            took = receiver.last_again - killed
        finally:
            for proc in (doomed, heir):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(60)
            receiver.stop()
        say(f"{backend}: all {args.items} delivered {took:.2f} s after the kill")
        return Row(
            f"kill -9 with {args.items} in flight -> all delivered",
            backend,
            f"{took:.2f} s",
            f"ttl {ttl:g} s",
            took / ttl,
            "<= 10 s",
            took <= 10.0,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--ttl", type=float, default=0.0, help="lease ttl, s (the default)")
    parser.add_argument("--backend", choices=BACKENDS, action="append")
    args = parser.parse_args()
    backends: list[Backend] = args.backend or list(BACKENDS)
    rows = [run(backend, args) for backend in backends]
    render("webhook_kill.py", rows, environment(backends))
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
