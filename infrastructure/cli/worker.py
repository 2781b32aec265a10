"""``tidings worker`` (the watch supervisor) and ``tidings accounts list``.

``--once`` is one reconciliation pass over every syncable account, then exit 0 (a
failed account is reported, not fatal). Without it the supervisor runs until SIGTERM /
SIGINT: watches stop, leases are released, then the process exits.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from types import FrameType
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from application.app import App
from application.mail.sync_outcome import SyncOutcome
from infrastructure.bootstrap import retention_sweeper
from infrastructure.bootstrap_workers import (
    build_outbound_delivery,
    build_supervisor,
    build_syncer,
    build_webhook_dispatcher,
)
from infrastructure.cli.output import (
    JsonFlag,
    MetricsPortOption,
    ProjectionsOption,
    WorkerIdOption,
    configure_logging,
    err,
    out,
    print_data,
)
from infrastructure.cli.runtime import is_embedded, load_settings, opened_app
from infrastructure.runtime.gc_policy import HeapKeeper
from infrastructure.runtime.metrics_http import serve_metrics
from infrastructure.runtime.settings import Settings
from workers.news import Wake
from workers.once import poll_once, syncable_accounts
from workers.outbound import OutboxWake, run_outbound
from workers.retention import run_retention
from workers.webhooks.metrics import WebhookMetrics

log = logging.getLogger("tidings.worker")


def _projection_follower(app: App, stop: threading.Event, wake: threading.Event) -> None:
    """Embedded mode: this process keeps the read models current, at once after an ingest."""
    while not stop.is_set():
        try:
            app.projections.catch_up()
        except Exception as error:  # a database hiccup: log, wait, go on
            log.warning("projections.failed error=%s", type(error).__name__)
            stop.wait(1.0)
        wake.wait(timeout=0.5)
        wake.clear()


def worker(  # noqa: PLR0917 - one parameter per command-line option
    once: Annotated[
        bool, typer.Option("--once", help="One poll pass over every syncable account, then exit.")
    ] = False,
    worker_id: WorkerIdOption = None,
    metrics_port: MetricsPortOption = None,
    projections: ProjectionsOption = None,
    webhooks: Annotated[
        bool,
        typer.Option("--webhooks/--no-webhooks", help="Deliver webhooks in this process too."),
    ] = True,
    as_json: JsonFlag = False,
) -> None:
    """Run the watch supervisor (IMAP IDLE, leases, tiers, polls)."""
    settings = load_settings()
    with opened_app() as app:
        if once:
            _once(app, settings, as_json)
            return
        name = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        configure_logging(logging.INFO)  # a service: its start, stop and watch changes
        stop, wake = threading.Event(), threading.Event()
        outbox_wake = OutboxWake()
        follow = is_embedded(app) if projections is None else projections
        supervisor = build_supervisor(
            app, settings, name, on_ingested=wake.set, also_on_signal=outbox_wake.on_signal
        )
        last_turn = [time.monotonic()]
        if metrics_port is not None:

            def health() -> tuple[bool, dict[str, object]]:
                age = time.monotonic() - last_turn[0]
                return age < 30, {
                    "workerId": name,
                    "loopAgeSeconds": round(age, 1),
                    "accountsOwned": len(supervisor.owner),
                }

            serve_metrics(metrics_port, supervisor.metrics.registry, health)

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()
            supervisor.inbox.tell(Wake())
            outbox_wake.event.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        if follow:
            threading.Thread(
                target=_projection_follower, args=(app, stop, wake), name="projections", daemon=True
            ).start()
        threading.Thread(target=HeapKeeper().run, args=(stop,), name="heap", daemon=True).start()
        if webhooks:
            dispatcher = build_webhook_dispatcher(
                app, settings, name, WebhookMetrics(supervisor.metrics.registry)
            )
            threading.Thread(
                target=dispatcher.run, args=(stop,), name="webhooks", daemon=True
            ).start()
        threading.Thread(
            target=run_outbound,
            args=(
                build_outbound_delivery(app, settings, name),
                stop,
                settings.send_interval,
                settings.send_concurrency,
                outbox_wake,
            ),
            name="outbound",
            daemon=True,
        ).start()
        threading.Thread(
            target=run_retention,
            args=(retention_sweeper(app, settings, holder=name), stop, settings.retention_interval),
            name="retention",
            daemon=True,
        ).start()
        err().print(f"worker {name} running (Ctrl-C to stop)")
        supervisor.run(stop, on_turn=lambda: last_turn.__setitem__(0, time.monotonic()))


def _once(app: App, settings: Settings, as_json: bool) -> None:
    syncer = build_syncer(app, settings)
    accounts = syncable_accounts(app)
    outcomes: list[SyncOutcome] = []
    with Progress(
        TextColumn("polling"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err(),
        transient=True,
        disable=as_json,
    ) as bar:
        task = bar.add_task("poll", total=len(accounts))

        def done(outcome: SyncOutcome) -> None:
            outcomes.append(outcome)
            bar.advance(task)

        poll_once(
            app,
            syncer,
            concurrency=settings.poll_concurrency,
            deadline_seconds=settings.poll_deadline,
            on_done=done,
        )
    failed = {o.account_id: o.error_kind for o in outcomes if o.error_kind}
    ingested = sum(o.ingested for o in outcomes)
    duplicates = sum(o.duplicates for o in outcomes)
    if as_json:
        print_data(
            {
                "accounts": len(outcomes),
                "ingested": ingested,
                "duplicates": duplicates,
                "failed": failed,
            },
            True,
        )
        return
    out().print(
        f"polled {len(outcomes)} accounts: {ingested} new messages, "
        f"{duplicates} already known, {len(failed)} failed"
    )
    for account_id, kind in failed.items():
        out().print(f"  {account_id}: {kind}")


accounts_app = typer.Typer(
    name="accounts", help="Mail accounts, as operators see them.", no_args_is_help=True
)


@accounts_app.command("list")
def list_accounts(as_json: JsonFlag = False) -> None:
    """Every mail account with its status and health (no personal data)."""
    with opened_app(existing=True) as app:
        if is_embedded(app):
            app.projections.catch_up()
        rows = app.ctx.mail.read_model.accounts(None)
        health = app.ctx.mail.state.health(r["accountId"] for r in rows)
        items = []
        for row in rows:
            h = health.get(row["accountId"])
            items.append(
                {
                    "accountId": row["accountId"],
                    "tenantId": row["tenantId"],
                    "status": row["status"],
                    "host": row["imap"].get("host"),
                    "messageCount": row["messageCount"],
                    "lastSyncAt": h.last_sync_at.isoformat() if h and h.last_sync_at else None,
                    "lastErrorKind": h.last_error_kind if h else None,
                    "watchState": h.watch_state if h else "idle",
                    "tier": h.tier if h else "warm",
                }
            )
        if as_json:
            print_data({"items": items}, True)
            return
        table = Table(
            "account", "tenant", "status", "host", "messages", "last sync", "error", "watch", "tier"
        )
        for i in items:
            table.add_row(
                i["accountId"],
                i["tenantId"],
                i["status"],
                str(i["host"]),
                str(i["messageCount"]),
                str(i["lastSyncAt"] or "-"),
                str(i["lastErrorKind"] or "-"),
                i["watchState"],
                i["tier"],
            )
        out().print(table)
