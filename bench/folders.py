"""The cost of a poll of an unchanged account: 10 folders x 50,000 messages, synced once,
then polled again with nothing changed; IMAP commands (each one round trip), bytes
sent and received, and the time per poll, counted by a tap in front of the private
Dovecot (``ImapTap``).

    python bench/folders.py [--backend sqlite|postgresql|both] [--folders 10]
                            [--messages 50000] [--polls 3]

Servers: Dovecot as it is (LIST-STATUS, CONDSTORE, QRESYNC), and started with CONDSTORE,
QRESYNC and LIST-STATUS hidden (the fallback). On each, the same account is also
polled by a syncer that keeps no counters (``seen`` off: every folder opened, flags
read, ``UID SEARCH ALL`` everywhere, as a poll did before), the ratio's base.

Set-up, not measured: ``--messages`` small messages per folder written straight into the
maildir (INBOX and ``--folders`` - 1 created folders, the account's ``folders`` setting
naming them), ingested by a first poll, then one more poll that saves the counters.
Run small for a smoke test (``--folders 3 --messages 2000``); the full size takes a
while to ingest and belongs to a machine with nothing else running.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imapclient import IMAPClient

from application.mail.account_sync import AccountSync
from bench._common import BACKENDS, Backend, say, scratch_database
from bench._mail import admin, connect_payload, mail, open_app, settings_for
from infrastructure.bootstrap_workers import build_syncer
from infrastructure.devkit.dovecot import DovecotServer, DovecotUser
from infrastructure.devkit.imap_tap import Cost, ImapTap

TENANT = "tenant-folders"
DEADLINE = 4 * 3600.0  # the first sync of the full size is set-up, and long
FALLBACK = ("CONDSTORE", "QRESYNC", "LIST-STATUS")


@dataclasses.dataclass(frozen=True)
class Measured:
    label: str
    commands: float
    examine: float
    fetch: float
    search: float
    sent: float
    received: float
    ms: float


def fill(server: DovecotServer, box: DovecotUser, folders: int, messages: int) -> list[str]:
    names = ["INBOX"] + [f"Bench{i}" for i in range(1, folders)]
    with IMAPClient(server.host, server.port, ssl=False, timeout=600) as client:
        client.login(box.name, box.password)
        for name in names[1:]:
            client.create_folder(name)
        for n, name in enumerate(names):
            say(f"filling {name}: {messages:,} messages")
            for start in range(0, messages, 5000):
                count = min(5000, messages - start)
                batch = [
                    mail(n * messages + start + i, f"{name} {start + i}") for i in range(count)
                ]
                server.deliver(box, batch, folder=name)
            client.select_folder(name, readonly=True)  # Dovecot indexes the folder now
    return names


def sync(syncer: AccountSync, account_id: str) -> int:
    outcome = syncer.sync(account_id, time.monotonic() + DEADLINE)
    if outcome.error_kind is not None:
        raise RuntimeError(f"poll failed: {outcome.error_kind}")
    return outcome.ingested


def measure(label: str, syncer: AccountSync, account_id: str, tap: ImapTap, polls: int) -> Measured:
    costs: list[Cost] = []
    started = time.perf_counter()
    for _ in range(polls):
        mark = tap.mark()
        sync(syncer, account_id)
        costs.append(tap.since(mark))
    took = (time.perf_counter() - started) / polls

    def per_poll(value: int) -> float:
        return value / polls

    return Measured(
        label,
        per_poll(sum(len(c.commands) for c in costs)),
        per_poll(sum(c.count(b"EXAMINE") for c in costs)),
        per_poll(sum(c.count(b"FETCH") for c in costs)),
        per_poll(sum(c.count(b"SEARCH") for c in costs)),
        per_poll(sum(c.sent for c in costs)),
        per_poll(sum(c.received for c in costs)),
        took * 1000,
    )


def run(
    server: DovecotServer, label: str, backend: Backend, args: argparse.Namespace
) -> list[Measured]:
    box = server.add_user(f"folders{os.getpid()}{backend[:2]}{label[:2]}", "pw-folders-bench")
    names = fill(server, box, args.folders, args.messages)
    with (
        scratch_database(backend, "folders") as scratch,
        ImapTap((server.host, server.port)) as tap,
    ):
        settings = settings_for(scratch.url, scratch.workdir / "blobs", max_messages_per_poll=1000)
        app = open_app(settings)
        try:
            payload = connect_payload(server, box)
            payload["imap"] = {**payload["imap"], "port": tap.port, "host": "127.0.0.1"}
            payload["folders"] = names
            result = app.write("connect-mail-account", payload, admin(TENANT))
            if not result.is_success or result.data is None:
                raise RuntimeError(f"connect-mail-account failed: {result.error}")
            account_id = str(result.data["accountId"])
            syncer = build_syncer(app, settings)
            say(f"{label} on {backend}: first sync of {args.folders * args.messages:,} messages")
            started = time.perf_counter()
            ingested = sync(syncer, account_id)
            say(f"  {ingested:,} ingested in {time.perf_counter() - started:,.0f} s")
            sync(syncer, account_id)  # saves the counters
            rows = [measure(label, syncer, account_id, tap, args.polls)]
            blind = copy.copy(syncer)
            blind.seen = None  # every folder opened, as a poll did before
            rows.append(measure(f"{label}, no counters kept", blind, account_id, tap, 1))
        finally:
            app.close()
    return rows


def table(rows: list[Measured]) -> list[str]:
    """Each server's rows, the ratio against its own row without counters."""
    lines = [
        "| server | commands (round trips) | EXAMINE | FETCH | SEARCH | sent | received"
        " | ms | bytes vs no counters |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "—"
        base = next((b for b in rows if b.label == f"{r.label}, no counters kept"), None)
        if base is not None:
            total, base_total = r.sent + r.received, base.sent + base.received
            ratio = f"{total / base_total:.4f}" if base_total else "—"
        lines.append(
            f"| {r.label} | {r.commands:,.0f} | {r.examine:,.0f} | {r.fetch:,.0f}"
            f" | {r.search:,.0f} | {r.sent:,.0f} B | {r.received:,.0f} B | {r.ms:,.0f} | {ratio} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--folders", type=int, default=10)
    parser.add_argument("--messages", type=int, default=50_000, help="per folder")
    parser.add_argument("--polls", type=int, default=3, help="unchanged polls measured")
    args = parser.parse_args()
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]
    print(f"{args.folders} folders x {args.messages:,} messages, unchanged; per poll")
    for backend in backends:
        rows: list[Measured] = []
        for label, hidden in (("dovecot", ()), ("fallback (no CONDSTORE/LIST-STATUS)", FALLBACK)):
            with DovecotServer(hide_capabilities=hidden) as server:
                rows += run(server, label, backend, args)
        print(f"\n{backend}, load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
        print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
