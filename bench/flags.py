"""Flag changes mirrored within one poll: 1,000 messages read in another client, then one
poll pass (``poll_once``: the arrivals, then INBOX's flags), on SQLite and PostgreSQL,
against the private Dovecot with CONDSTORE and started without CONDSTORE and QRESYNC
(the window).

    python bench/flags.py [--backend sqlite|postgresql|both] [--messages 2000] [--changes 1000]

Per backend and server: a fresh database, ``--messages`` small messages ingested by a
first poll; one ``STORE +FLAGS (\\Seen)`` over ``--changes`` of them in another IMAP
client; then the timed poll (its ``MessageFlagsChanged`` events counted: goal, exactly
``--changes``, within one poll) and an unchanged poll after it (goal: no event; with
CONDSTORE no FETCH at all). The load average is printed beside each row.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imapclient import IMAPClient

from application.app import App
from bench._common import BACKENDS, Backend, say, scratch_database
from bench._mail import admin, connect, mail, open_app, settings_for
from infrastructure.bootstrap_workers import build_syncer
from infrastructure.devkit.dovecot import DovecotServer
from workers.once import poll_once

TENANT = "tenant-flags"
FLAGS_CHANGED = "tidings.mail.MessageFlagsChanged"


def events_of(app: App, topic: str) -> int:
    store: Any = app.ctx.store  # the recorder's own reader (``read_raw``)
    total = position = 0
    while batch := store.read_raw(position, 5000):
        total += sum(1 for n in batch if n.topic == topic)
        position = batch[-1].id
    return total


def one(server: DovecotServer, label: str, backend: Backend, messages: int, changes: int) -> str:
    box = server.add_user(f"flags{os.getpid()}{backend[:2]}{label[:2]}", "pw-flags-bench")
    server.deliver(box, [mail(i, f"flags {i}") for i in range(messages)])
    with scratch_database(backend, "flags") as scratch:
        settings = settings_for(scratch.url, scratch.workdir / "blobs", max_messages_per_poll=500)
        app = open_app(settings)
        try:
            user = admin(TENANT)
            connect(app, user, server, box)
            syncer = build_syncer(app, settings)
            poll_once(app, syncer, concurrency=1, deadline_seconds=600.0)
            with IMAPClient(server.host, server.port, ssl=False, timeout=60) as client:
                client.login(box.name, box.password)
                client.select_folder("INBOX")
                uids = sorted(client.search(["ALL"]))[-changes:]
                client.add_flags(uids, [b"\\Seen"], silent=True)
            started = time.perf_counter()
            poll_once(app, syncer, concurrency=1, deadline_seconds=600.0)
            took = time.perf_counter() - started
            mirrored = events_of(app, FLAGS_CHANGED)
            started = time.perf_counter()
            poll_once(app, syncer, concurrency=1, deadline_seconds=600.0)
            quiet = time.perf_counter() - started
            after = events_of(app, FLAGS_CHANGED)
        finally:
            app.close()
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    ok = "✓" if mirrored == changes and after == mirrored else "✗"
    return (
        f"| {backend} | {label} | {changes:,} of {messages:,} | {took * 1000:,.0f} ms"
        f" ({mirrored:,} events {ok}) | {quiet * 1000:,.0f} ms ({after - mirrored} events)"
        f" | {load} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--changes", type=int, default=1000)
    args = parser.parse_args()
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]
    rows = []
    for label, hidden in (("condstore", ()), ("window", ("CONDSTORE", "QRESYNC"))):
        with DovecotServer(hide_capabilities=hidden) as server:
            for backend in backends:
                say(f"{label} on {backend}")
                rows.append(one(server, label, backend, args.messages, args.changes))
    print("| backend | server | changed | the poll that mirrors them | an unchanged poll | load |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
