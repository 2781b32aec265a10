"""Two ``tidings webhooks run`` processes on one database, on both backends: every
item reaches a healthy endpoint once, in order, and no delivery is attempted by both
at once, also for an endpoint that fails every first attempt."""

from __future__ import annotations

import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

from application import User
from application.app import App
from infrastructure.bootstrap import bootstrap
from tests.e2e.process import Cli
from tests.integration.webhooks.helpers import define_fields, eventually
from tests.support.results import ok
from tests.support.webhook_receiver import Answer, Received, Receiver


def _app_beside(cli: Cli, database_url: str) -> App:
    """An app on the store the CLI processes use, with their key."""
    return bootstrap(
        database_url=database_url,
        blob_dir=Path(cli.env["TIDINGS_BLOB_DIR"]),
        master_key=cli.env["TIDINGS_MASTER_KEY"],
        allow_private_hosts=True,
        project_inline=False,
    )


def test_two_delivery_processes_share_the_work_without_overlap(
    cli: Cli, database_url: str, tmp_path: Path
) -> None:
    app = _app_beside(cli, database_url)
    admin = User(id="a", tenant_id="t-procs", roles=frozenset({"TenantAdmin"}))
    seen: set[str] = set()
    lock = threading.Lock()

    def fail_first(got: Received) -> Answer:
        with lock:
            event = got.headers["Tidings-Event-Id"]
            first = event not in seen
            seen.add(event)
        return Answer(status=500 if first else 200, delay=0.05)

    healthy, flaky = Receiver(), Receiver(fail_first)
    for receiver in (healthy, flaky):
        ok(app.write("create-webhook", {"url": receiver.url, "events": ["*"]}, admin))
    settings = {"webhook_retry_first": "0.05", "webhook_retry_longest": "0.2"}
    procs = [
        cli.popen("webhooks", "run", "--worker-id", f"p{n}", "--projections", **settings)
        for n in range(2)
    ]
    try:
        define_fields(app, admin, 20)
        healthy.wait_for(20, timeout=60)
        eventually(lambda: len(flaky.received) >= 40, timeout=60)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.communicate(timeout=30)
        app.close()
    assert all(proc.returncode == 0 for proc in procs)
    ids = [r.headers["Tidings-Event-Id"] for r in healthy.received]
    assert len(ids) == len(set(ids)) == 20
    assert healthy.max_in_flight_per_event == 1 and flaky.max_in_flight_per_event == 1
    assert len(flaky.received) == 40
    sequences = [r.item["sequence"] for r in healthy.received]
    assert sequences == sorted(sequences)
    attempts: dict[str, list[str]] = defaultdict(list)
    for r in flaky.received:
        attempts[r.headers["Tidings-Event-Id"]].append(r.headers["Tidings-Delivery-Attempt"])
    assert all(a == ["1", "2"] for a in attempts.values())


def test_a_killed_delivery_processs_claims_are_delivered_by_another_within_its_lease(
    cli: Cli, database_url: str
) -> None:
    app = _app_beside(cli, database_url)
    admin = User(id="a", tenant_id="t-kill", roles=frozenset({"TenantAdmin"}))
    # Every first attempt hangs past the kill; a second one is answered at once.
    receiver = Receiver(
        lambda got: Answer(delay=30.0 if got.headers["Tidings-Delivery-Attempt"] == "1" else 0)
    )
    hooks = 8
    for _ in range(hooks):  # one order each: all eight in flight at once
        ok(app.write("create-webhook", {"url": receiver.url, "events": ["*"]}, admin))
    ttl = 3.0
    settings = {"webhook_lease_ttl": str(ttl), "webhook_per_host": "16", "webhook_timeout": "25"}
    first = cli.popen("webhooks", "run", "--worker-id", "doomed", "--projections", **settings)
    heir = None
    try:
        define_fields(app, admin, 1)
        receiver.wait_for(hooks, timeout=60)
        first.kill()
        killed = time.monotonic()
        first.communicate(timeout=30)
        heir = cli.popen("webhooks", "run", "--worker-id", "heir", "--projections", **settings)
        eventually(lambda: len(receiver.received) >= 2 * hooks, timeout=60)
        took = time.monotonic() - killed
    finally:
        for proc in (first, heir):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.communicate(timeout=60)
        app.close()
    assert took <= ttl + 5.0, f"claims came back {took:.1f}s after the kill"
    attempts = sorted(r.headers["Tidings-Delivery-Attempt"] for r in receiver.received)
    assert attempts == ["1"] * hooks + ["2"] * hooks
