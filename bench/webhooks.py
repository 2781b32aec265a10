"""Webhook delivery at fleet scale, and the feed read over HTTP.

N tenants with one webhook each, every tenth endpoint slow (it answers after 2 s).
Reported:

- *throughput*: a backlog of feed items (``custom_field_value.set``, seeded straight
  into the log) drained by one delivery loop: delivered/s to the healthy endpoints;
- *latency*: items written live at a steady rate, first with every endpoint healthy
  (idle run), then with the slow ones slow: the healthy endpoints' p99 from the item's
  ``occurredAt`` to its receipt, slow run against idle run (goal: within 20%);
- *order*: deliveries received out of sequence order per webhook (goal: 0);
- *feed over HTTP*: ``GET /v1/events?after=&limit=1000`` pages of one tenant through
  uvicorn, items/s.

    python bench/webhooks.py                       # 1,000 tenants, 100,000 items
    python bench/webhooks.py --tenants 200 --items 10000 --rate 200 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import sys
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

import httpx
import uvicorn

from application.app import App
from bench._common import (
    BACKENDS,
    Backend,
    Row,
    ValueSeeder,
    admin_of,
    environment,
    percentile,
    render,
    say,
    scratch_database,
)
from domain.webhook import RetryPolicy
from infrastructure.bootstrap import bootstrap
from infrastructure.bootstrap_workers import webhook_dispatcher
from infrastructure.http.api import create_api
from infrastructure.http.door import ApiSettings
from workers.policies.webhook_lanes import LaneSettings
from workers.webhooks.dispatcher import DispatchSettings


class _Server(ThreadingHTTPServer):
    # The listen backlog is set when the socket is bound, so it is a class attribute:
    # with the default (5) a burst of connections overflows it, the dropped SYNs are
    # sent again after 1 s and healthy endpoints look slow.
    request_queue_size = 1024
    daemon_threads = True


class Sink:
    """One loopback HTTP server for every endpoint: ``/hook/N``; slow ones sleep."""

    def __init__(self, slow_delay: float, slow: set[int]) -> None:
        self.slow = slow
        self.slow_on = False
        self.slow_delay = slow_delay
        self.lock = threading.Lock()
        self.got: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.path.rsplit("/", 1)[1])
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                now = time.time()
                if sink.slow_on and n in sink.slow:
                    time.sleep(sink.slow_delay)
                item = json.loads(body)
                occurred = datetime.fromisoformat(item["occurredAt"]).timestamp()
                with sink.lock:
                    sink.got[n].append((int(item["sequence"]), occurred, now))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def healthy_count(self) -> int:
        with self.lock:
            return sum(len(v) for n, v in self.got.items() if n not in self.slow)

    def out_of_order(self) -> int:
        with self.lock:
            bad = 0
            for rows in self.got.values():
                seqs = [s for s, _, _ in rows]
                bad += sum(1 for a, b in itertools.pairwise(seqs) if b <= a)
            return bad

    def healthy_latencies(self, since: float) -> list[float]:
        with self.lock:
            return [
                at - occurred
                for n, rows in self.got.items()
                if n not in self.slow
                for _, occurred, at in rows
                if occurred >= since
            ]


def _serve_sink(conn: Connection, slow_delay: float, slow: set[int]) -> None:
    """The sink's process: answers the benchmark's questions until told to stop."""
    sink = Sink(slow_delay, slow)
    conn.send(sink.port)
    while True:
        command, argument = conn.recv()
        if command == "stop":
            sink.server.shutdown()
            conn.send(None)
            return
        if command == "slow_on":
            sink.slow_on = True
            conn.send(None)
        elif command == "healthy_count":
            conn.send(sink.healthy_count())
        elif command == "out_of_order":
            conn.send(sink.out_of_order())
        elif command == "healthy_latencies":
            conn.send(sink.healthy_latencies(argument))


class RemoteSink:
    """The sink in a process of its own, so that the endpoints' work does not compete
    with the delivery loop for this process's interpreter lock (as real endpoints
    elsewhere do not)."""

    def __init__(self, slow_delay: float, slow: set[int]) -> None:
        self.slow = slow
        self._conn, child = multiprocessing.get_context("spawn").Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=_serve_sink, args=(child, slow_delay, slow), daemon=True
        )
        self._process.start()
        self.port: int = self._conn.recv()

    def _ask(self, command: str, argument: Any = None) -> Any:
        self._conn.send((command, argument))
        return self._conn.recv()

    def slow_down(self) -> None:
        self._ask("slow_on")

    def healthy_count(self) -> int:
        return int(self._ask("healthy_count"))

    def out_of_order(self) -> int:
        return int(self._ask("out_of_order"))

    def healthy_latencies(self, since: float) -> list[float]:
        return list(self._ask("healthy_latencies", since))

    def stop(self) -> None:
        self._ask("stop")
        self._process.join(10)


def _follow(app: App, stop: threading.Event) -> None:
    while not stop.is_set():
        app.projections.catch_up()
        stop.wait(0.05)


def _seed(app: App, seeder: ValueSeeder, tenants: list[str], count: int, start: int) -> None:
    seeder._now = datetime.now(UTC)
    for i in range(count):
        tenant = tenants[(start + i) % len(tenants)]
        seeder.set(tenant, "contact", f"c{start + i}", "tier", 1, f"v{i}")
    seeder.flush()


def _wait(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def run(backend: Backend, args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    with scratch_database(backend, "webhooks") as scratch:
        app = bootstrap(
            database_url=scratch.url,
            blob_dir=scratch.workdir / "blobs",
            allow_private_hosts=True,
            project_inline=False,
        )
        sink = RemoteSink(
            args.slow_delay, {n for n in range(args.tenants) if n % args.slow_every == 0}
        )
        tenants = [f"bt-{n}" for n in range(args.tenants)]
        say(f"{backend}: {len(tenants)} tenants, a field and a webhook each")
        for n, tenant in enumerate(tenants):
            admin = admin_of(tenant)
            app.write(
                "define-tenant-field",
                {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}},
                admin,
            )
            app.write(
                "create-webhook",
                {
                    "url": f"http://127.0.0.1:{sink.port}/hook/{n}",
                    "events": ["custom_field_value."],
                },
                admin,
            )
        app.projections.catch_up()
        dispatcher = webhook_dispatcher(
            app,
            DispatchSettings(
                timeout=10.0,
                retry=RetryPolicy(),
                lanes=LaneSettings(fast_pool=args.pool, slow_pool=8, per_host=2),
                interval=0.05,
            ),
            "bench",
            allow_private=True,
        )
        dispatcher.fan_out()  # the webhooks' cursors past their tenants' definitions
        stop = threading.Event()
        loop = threading.Thread(target=dispatcher.run, args=(stop,), daemon=True)
        loop.start()
        threading.Thread(target=_follow, args=(app, stop), daemon=True).start()
        seeder = ValueSeeder(app.ctx.store, chunk=500, ctx=app.ctx)
        written = 0

        def live(seconds: float) -> list[float]:
            nonlocal written
            began = time.time()
            tick = 0.1
            per_tick = max(1, int(args.rate * tick))
            while time.time() - began < seconds:
                _seed(app, seeder, tenants, per_tick, written)
                written += per_tick
                time.sleep(tick)
            healthy_due = written - written // args.slow_every  # roughly: wait for healthy
            _wait(lambda: sink.healthy_count() >= healthy_due * 0.98, 120)
            return sink.healthy_latencies(began)

        say(f"{backend}: warm-up (3 s, not measured)")  # connections, plans, caches
        live(3.0)
        say(f"{backend}: idle run ({args.rate}/s for {args.seconds}s, every endpoint fast)")
        idle = live(args.seconds)
        say(f"{backend}: backlog of {args.items} items, one endpoint in {args.slow_every} slow")
        sink.slow_down()
        before = sink.healthy_count()
        _seed(app, seeder, tenants, args.items, written)
        written += args.items
        healthy_items = sum(
            1
            for i in range(args.items)
            if ((written - args.items + i) % len(tenants)) not in sink.slow
        )
        started = time.monotonic()
        _wait(lambda: sink.healthy_count() - before >= healthy_items, args.timeout)
        drained = time.monotonic() - started
        delivered = sink.healthy_count() - before
        say(f"{backend}: slow run ({args.rate}/s for {args.seconds}s)")
        slow = live(args.seconds)
        p99_idle, p99_slow = percentile(idle, 0.99), percentile(slow, 0.99)
        rows.append(
            Row(
                "healthy delivered/s (backlog)",
                backend,
                f"{delivered / drained:,.0f}/s",
                f"{delivered:,} items",
                delivered / max(healthy_items, 1),
                "all delivered",
                delivered >= healthy_items,
            )
        )
        rows.append(
            Row(
                "healthy p99 latency, slow vs idle",
                backend,
                f"{p99_slow * 1000:,.0f} ms",
                f"{p99_idle * 1000:,.0f} ms",
                p99_slow / max(p99_idle, 1e-9),
                "ratio <= 1.2",
                p99_slow <= 1.2 * p99_idle,
            )
        )
        bad = sink.out_of_order()
        rows.append(Row("out-of-order deliveries", backend, str(bad), "0", 0.0, "0", bad == 0))
        stop.set()
        loop.join(60)
        rows.append(_feed_over_http(app, seeder, args.feed_items, backend))
        app.close()
        sink.stop()
    return rows


def _feed_over_http(app: App, seeder: ValueSeeder, count: int, backend: Backend) -> Row:
    tenant = "bt-feed"
    admin = admin_of(tenant)
    app.write(
        "define-tenant-field",
        {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}},
        admin,
    )
    _seed(app, seeder, [tenant], count, 10**9)
    app.projections.catch_up()
    key = app.write("create-api-key", {"name": "bench", "roles": ["TenantAdmin"]}, admin)
    assert key.data is not None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = create_api(
        app,
        ApiSettings(
            rate_per_second=10_000.0,
            rate_burst=10_000,
            address_rate_per_second=10_000.0,
            address_rate_burst=10_000,
            global_rate_per_second=10_000.0,
            global_rate_burst=10_000,
        ),
    )
    server = uvicorn.Server(
        uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    threading.Thread(target=server.run, daemon=True).start()
    _wait(lambda: server.started, 30)
    headers = {"Authorization": f"Bearer {key.data['key']}"}
    got, after = 0, 0
    started = time.monotonic()
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as client:
        while True:
            page = client.get("/v1/events", params={"after": after, "limit": 1000}).json()
            if not page["items"]:
                break
            got += len(page["items"])
            after = page["nextAfter"]
    seconds = time.monotonic() - started
    server.should_exit = True
    return Row(
        "feed catch-up over HTTP",
        backend,
        f"{got / seconds:,.0f} items/s",
        f"{got:,} items",
        got / max(count + 1, 1),
        "all items",
        got == count + 1,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="sqlite")
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--slow-every", type=int, default=10)
    parser.add_argument("--slow-delay", type=float, default=2.0)
    parser.add_argument("--rate", type=float, default=200.0, help="live items per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="each live run")
    parser.add_argument("--pool", type=int, default=32)
    parser.add_argument("--feed-items", type=int, default=20_000)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]
    rows = [row for backend in backends for row in run(backend, args)]
    render(
        "webhooks",
        rows,
        environment(backends),
        notes=[
            f"{args.tenants} tenants x 1 webhook, {args.items} backlog items, one endpoint in"
            f" {args.slow_every} slow ({args.slow_delay} s); live runs {args.rate}/s for"
            f" {args.seconds} s; one delivery loop, pool {args.pool}"
        ],
    )
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
