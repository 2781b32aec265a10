"""The console with many accounts: the accounts page's server time, and how long a change
takes to reach an open live stream.

One tenant with N mail accounts (connected through the handler, no IMAP dialled), the
console served by uvicorn on loopback in this process. Reported:

- *accounts page*: ``GET /console/accounts`` (the first page of 50, and a search) —
  wall time per request and this process's CPU time per request (goal: <= 300 ms);
- *live delay*: an account disconnected through the handler, its projections caught up,
  until the ``update`` event carrying its new status arrives on the stream that page
  opened (goal: <= 2 s).

    python bench/console.py                     # 10,000 accounts, SQLite
    python bench/console.py --accounts 2000 --backend postgresql
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import psycopg
import uvicorn

from application import User
from application.app import App
from bench._common import PG_DSN, console
from infrastructure.bootstrap import bootstrap
from infrastructure.http.api import create_api


def connect_many(app: App, admin: User, count: int) -> list[str]:
    ids = []
    for index in range(count):
        payload = {
            "provider": "imap",
            "displayName": f"Box {index}",
            "address": f"box{index}@mail.example",
            "scope": "shared",
            "authMethod": "password",
            "imap": {"host": "127.0.0.1", "port": 1, "security": "none", "username": "u"},
            "secret": "pw",
        }
        result = app.write("connect-mail-account", payload, admin)
        assert result.data is not None, result.error
        ids.append(str(result.data["accountId"]))
    app.projections.catch_up()
    return ids


def serve(app: App) -> tuple[uvicorn.Server, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(create_api(app), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


def timed(http: httpx.Client, path: str, rounds: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(rounds):
        cpu, wall = time.process_time(), time.perf_counter()
        response = http.get(path)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        assert response.status_code == 200, response.status_code
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def live_delay(http: httpx.Client, app: App, admin: User, account: str) -> float:
    with http.stream("GET", f"/console/events?view=accounts&ids={account}") as stream:
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data: ") and f'"{account}.status"' in line:
                break
        started = time.perf_counter()
        app.write("disconnect-mail-account", {"accountId": account}, admin)
        app.projections.catch_up()
        for line in lines:
            if f'"{account}.status":"disconnected"' in line:
                return time.perf_counter() - started
    raise AssertionError("the change never arrived")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accounts", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-console-"))
    schema = "b_" + uuid.uuid4().hex[:10]
    url = (
        f"sqlite:///{root / 'tidings.db'}"
        if args.backend == "sqlite"
        else f"{PG_DSN}?schema={schema}"
    )
    app = bootstrap(
        None,
        database_url=url,
        blob_dir=str(root / "blobs"),
        master_key=base64.b64encode(os.urandom(32)).decode(),
        allow_private_hosts=True,
    )
    try:
        admin = User(id="ops", tenant_id="t-bench", roles=frozenset({"TenantAdmin"}))
        started = time.perf_counter()
        ids = connect_many(app, admin, args.accounts)
        console.print(f"{len(ids):,} accounts connected in {time.perf_counter() - started:.1f} s")
        key = app.write("create-api-key", {"name": "bench", "roles": ["TenantAdmin"]}, admin)
        assert key.data is not None
        server, base = serve(app)
        with httpx.Client(base_url=base, timeout=30.0) as http:
            http.post("/console/sign-in", data={"key": key.data["key"]})
            first = timed(http, "/console/accounts", args.rounds)
            later = timed(http, "/console/accounts?page=150", args.rounds)
            search = timed(http, "/console/accounts?q=box99", args.rounds)
            page = http.get("/console/accounts").text
            rows = len(re.findall(r'data-live="[^"]+\.status"', page))
            delays = [live_delay(http, app, admin, ids[i]) for i in range(3)]
        server.should_exit = True
        goal = "goal <= 300 ms"
        print(f"backend={args.backend} accounts={len(ids):,} rows on a page={rows}")
        print(f"accounts page 1:    {first[0]:.0f} ms wall, {first[1]:.0f} ms CPU ({goal})")
        print(f"accounts page 150:  {later[0]:.0f} ms wall, {later[1]:.0f} ms CPU ({goal})")
        print(f"search 'box99':     {search[0]:.0f} ms wall, {search[1]:.0f} ms CPU ({goal})")
        shown = ", ".join(f"{d:.2f}" for d in delays)
        print(f"live update delay:  {shown} s (goal <= 2 s)")
    finally:
        app.close()
        if args.backend == "postgresql":
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
