"""Mail ingest throughput and memory, tidings against a naive ingester and raw IMAP, side
by side in one run, on SQLite and PostgreSQL.

    python bench/ingest.py [--backend sqlite|postgresql|both] [--messages 10000] [--quick]

One private Dovecot holds a mailbox of N mixed ~4 KB messages (text/plain in utf-8 and
latin-1 quoted-printable, multipart/alternative with HTML, multipart/mixed with a base64
attachment, ~3% malformed), written straight into its maildir. Then, per backend:

1. tidings: ``connect-mail-account`` on a fresh database, then ``poll_once`` — fetch,
   parse, blob store, sealed ``MessageIngested`` events, read models caught up —
   messages/s. Naive and tidings runs alternate (naive, then ``--rounds`` x (tidings,
   naive)) and each side's median is compared, so load from other processes on the
   machine hits both alike.
2. baseline: imapclient ``UID FETCH`` in batches of 200 ``BODY.PEEK[]`` and stdlib
   ``BytesParser(policy=policy.default)``, reading the headers and the first text part,
   like a naive ingester (nothing stored). Goal: tidings >= 3x its messages/s.
3. raw: imaplib ``UID FETCH`` of the same batches, nothing parsed: the limit.
4. memory: ``tidings worker --once`` as a child process against a fresh database whose
   one account holds one message of 100 MB (just under ``max_message_mb``), and one of
   1 MB; the child's peak RSS from ``wait4`` (ru_maxrss). Goal: the 100 MB message costs
   at most ``parse_concurrency x stream_parse_mb`` more than the 1 MB one (docs/workers.md).
"""

from __future__ import annotations

import argparse
import imaplib
import json
import secrets
import sys
import time
from collections.abc import Callable
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imapclient import IMAPClient

from bench._common import (
    BACKENDS,
    Backend,
    environment,
    median,
    raw_connection,
    say,
    scratch_database,
    settle,
    timed,
)
from bench._mail import (
    Line,
    admin,
    big_message,
    connect,
    corpus,
    open_app,
    private_dovecot,
    report,
    run_measured,
    settings_for,
    worker_argv,
    worker_env,
)
from infrastructure.bootstrap_workers import build_syncer
from infrastructure.devkit.dovecot import DovecotServer, DovecotUser
from infrastructure.eventstore.recorder import EVENTS_TABLE
from workers.once import poll_once

BATCH = 200
GOAL_RATIO = 3.0
TENANT = "tenant-ingest"
MB = 1_000_000


# --- the baselines ----------------------------------------------------------------------


def naive_ingest(server: DovecotServer, box: DovecotUser) -> int:
    """imapclient + ``policy.default``: what a first ingester written in an afternoon does.
    Returns how many messages it read (those the parser refused included)."""
    parser = BytesParser(policy=policy.default)
    seen = 0
    with IMAPClient(server.host, server.port, ssl=False, timeout=60) as client:
        client.login(box.name, box.password)
        client.select_folder("INBOX", readonly=True)
        uids = sorted(client.search(["ALL"]))
        for start in range(0, len(uids), BATCH):
            response = client.fetch(uids[start : start + BATCH], ["BODY.PEEK[]"])
            for item in response.values():
                raw = item.get(b"BODY[]")
                if not isinstance(raw, bytes):
                    continue
                seen += 1
                try:
                    msg = parser.parsebytes(raw)
                    fields = [
                        str(msg[name] or "")
                        for name in (
                            "Message-ID",
                            "Date",
                            "From",
                            "To",
                            "Cc",
                            "Subject",
                            "In-Reply-To",
                            "References",
                        )
                    ]
                    body = msg.get_body(preferencelist=("plain", "html"))
                    text = body.get_content() if body is not None else ""
                    _ = (fields, " ".join(str(text)[:2000].split())[:200])
                except Exception:
                    continue
    return seen


def raw_fetch(server: DovecotServer, box: DovecotUser) -> int:
    """imaplib, the same UID FETCH batches, nothing parsed: the floor of the fetch."""
    imap = imaplib.IMAP4(server.host, server.port, timeout=60)
    try:
        imap.login(box.name, box.password)
        imap.select("INBOX", readonly=True)
        _, data = imap.uid("SEARCH", "ALL")
        uids = [int(u) for u in data[0].split()] if data and data[0] else []
        seen = 0
        for start in range(0, len(uids), BATCH):
            group = ",".join(str(u) for u in uids[start : start + BATCH])
            _, fetched = imap.uid("FETCH", group, "(BODY.PEEK[])")
            seen += sum(1 for part in fetched if isinstance(part, tuple))
        return seen
    finally:
        imap.logout()


# --- tidings ------------------------------------------------------------------------------


def _count_rows(scratch: Any, sql: str) -> list[tuple[Any, ...]]:
    conn = raw_connection(scratch)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def tidings_ingest(
    backend: Backend, server: DovecotServer, box: DovecotUser, count: int
) -> tuple[float, dict[str, int], int]:
    """One timed tidings ingest of the mailbox on a fresh database: seconds, the read
    model's message states, the events stored."""
    with scratch_database(backend, "ingest") as scratch:
        settings = settings_for(scratch.url, scratch.workdir / "blobs")
        app = open_app(settings)
        try:
            syncer = build_syncer(app, settings)
            settle(scratch)
            outcomes: list[Any] = []

            def run() -> None:
                connect(app, admin(TENANT), server, box)
                outcomes.extend(
                    poll_once(
                        app, syncer, concurrency=settings.poll_concurrency, deadline_seconds=3600
                    )
                )

            seconds = timed(run)
            ingested = sum(o.ingested for o in outcomes)
            failed = [o.error_kind for o in outcomes if o.error_kind]
            states = dict(
                _count_rows(scratch, "SELECT state, count(*) FROM mail_messages GROUP BY state")
            )
            [(events,)] = _count_rows(scratch, f"SELECT count(*) FROM {EVENTS_TABLE}")
        finally:
            app.close()
    if failed or ingested != count or sum(states.values()) != count:
        raise RuntimeError(
            f"[{backend}] incomplete: ingested {ingested}, read model {states}, failed {failed}"
        )
    return seconds, states, events


def bench_throughput(
    backend: Backend, server: DovecotServer, box: DovecotUser, count: int, rounds: int
) -> list[Line]:
    """Naive and tidings alternately (N T N T … N), each side's median: load from other
    processes on the machine hits both alike."""
    say(f"[{backend}] ingest: naive, then {rounds} x (tidings, naive) ({count:,} messages)")
    seen: list[int] = []
    naive_s = [timed(lambda: seen.append(naive_ingest(server, box)))]
    ours_s: list[float] = []
    for _ in range(rounds):
        seconds, states, events = tidings_ingest(backend, server, box, count)
        ours_s.append(seconds)
        naive_s.append(timed(lambda: seen.append(naive_ingest(server, box))))
    say(f"[{backend}] raw imaplib fetch")
    raw_s = timed(lambda: seen.append(raw_fetch(server, box)))
    if seen != [count] * len(seen):
        raise RuntimeError(f"[{backend}] the baselines read {seen}, expected {count} each")
    ours_rate, naive_rate = count / median(ours_s), count / median(naive_s)
    raw_rate = count / raw_s
    ratio = ours_rate / naive_rate
    say(
        f"[{backend}] tidings {', '.join(f'{s:.1f}s' for s in ours_s)} ({ours_rate:,.0f}/s); "
        f"naive {', '.join(f'{s:.1f}s' for s in naive_s)} ({naive_rate:,.0f}/s); "
        f"raw {raw_s:.2f}s; read model {states}; {events} events"
    )
    return [
        Line(
            f"ingest {count:,} msgs, msg/s (vs naive)",
            backend,
            f"{ours_rate:,.0f}",
            f"{naive_rate:,.0f}",
            f"{ratio:.2f}x",
            f">= {GOAL_RATIO:.0f}x",
            ratio >= GOAL_RATIO,
        ),
        Line(
            "ingest msg/s (vs raw imaplib fetch)",
            backend,
            f"{ours_rate:,.0f}",
            f"{raw_rate:,.0f}",
            f"{ours_rate / raw_rate:.2f}x",
            "(the limit)",
            None,
        ),
    ]


# --- memory -------------------------------------------------------------------------------


def peak_rss(backend: Backend, server: DovecotServer, box: DovecotUser) -> tuple[int, int, float]:
    """Peak RSS (KiB; ru_maxrss, and the VmHWM seen while polling) of ``tidings worker
    --once`` ingesting ``box``, on a fresh database; and its run time."""
    with scratch_database(backend, "rss") as scratch:
        settings = settings_for(scratch.url, scratch.workdir / "blobs")
        app = open_app(settings)
        try:
            connect(app, admin(TENANT), server, box)
            app.projections.catch_up()
        finally:
            app.close()
        done = run_measured(worker_argv("--once", "--json"), worker_env(settings))
        if done.returncode != 0:
            raise RuntimeError(f"worker --once failed ({done.returncode}): {done.stderr[-2000:]}")
        summary = json.loads(done.stdout)
        if summary.get("ingested") != 1 or summary.get("failed"):
            raise RuntimeError(f"worker --once did not ingest the message: {summary}")
        rows = _count_rows(scratch, "SELECT state, size_bytes, body_ref FROM mail_messages")
        if len(rows) != 1 or rows[0][0] != "ok" or not rows[0][2]:
            raise RuntimeError(f"unexpected read model after the big message: {rows}")
    return done.max_rss_kib, done.hwm_kib, done.seconds


def bench_memory(backend: Backend, server: DovecotServer, boxes: dict[int, DovecotUser]) -> Line:
    rss = {}
    for size, box in boxes.items():
        say(f"[{backend}] memory: worker --once with one {size // MB} MB message")
        rss[size], hwm, seconds = peak_rss(backend, server, box)
        say(
            f"[{backend}]   peak RSS {rss[size] / 1024:.1f} MiB (VmHWM polled: "
            f"{hwm / 1024:.1f} MiB) in {seconds:.1f}s"
        )
    small, big = min(boxes), max(boxes)
    delta_mib = (rss[big] - rss[small]) / 1024
    allowed = 4 * 4.0  # parse_concurrency x stream_parse_mb (defaults)
    return Line(
        f"worker --once peak RSS, one {big // MB} MB msg (vs 1 MB)",
        backend,
        f"{rss[big] / 1024:.1f} MiB",
        f"{rss[small] / 1024:.1f} MiB",
        f"{delta_mib:+.1f} MiB",
        f"<= +{allowed:.0f} MiB",
        delta_mib <= allowed,
    )


# --- main ---------------------------------------------------------------------------------


def seed(server: DovecotServer, count: int) -> tuple[DovecotUser, dict[int, DovecotUser]]:
    box = server.add_user("bulk", secrets.token_urlsafe(12))
    say(f"seeding {count:,} mixed messages into the maildir")
    messages = corpus(count)
    server.deliver(box, messages)
    status = server.index(box)
    if status.get("messages") != count:
        raise RuntimeError(f"dovecot indexed {status}, expected {count} messages")
    say(f"  {sum(map(len, messages)) / count:,.0f} bytes a message on average; indexed")
    boxes = {}
    for size in (1 * MB, 100 * MB):
        big = server.add_user(f"big{size // MB}", secrets.token_urlsafe(12))
        server.deliver(big, [big_message(size)])
        server.index(big)
        boxes[size] = big
    return box, boxes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=[*BACKENDS, "both"], default="both")
    parser.add_argument("--messages", type=int, help="messages in the mailbox (10k; quick 2k)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--rounds", type=int, default=2, help="timed tidings runs (2)")
    parser.add_argument(
        "--only", choices=["throughput", "memory"], action="append", help="repeatable"
    )
    args = parser.parse_args(argv)
    count = args.messages or (2_000 if args.quick else 10_000)
    backends: list[Backend] = list(BACKENDS) if args.backend == "both" else [args.backend]

    started = time.perf_counter()
    lines: list[Line] = []
    with private_dovecot() as server:
        box, boxes = seed(server, count)
        say("warm-up: one raw fetch (page cache, Dovecot's index and cache file)")
        raw_fetch(server, box)
        only = set(args.only or ["throughput", "memory"])
        plan: list[Callable[[Backend], list[Line]]] = []
        if "throughput" in only:
            plan.append(lambda b: bench_throughput(b, server, box, count, args.rounds))
        if "memory" in only:
            plan.append(lambda b: [bench_memory(b, server, boxes)])
        for backend in backends:
            for run in plan:
                lines.extend(run(backend))
    elapsed = time.perf_counter() - started
    report(
        "tidings mail ingest vs a naive ingester and raw IMAP (same run, same machine)",
        lines,
        [*environment(backends), "IMAP: private Dovecot 2.3 on loopback (maildir)"],
        notes=[
            "ingest: connect-mail-account + poll_once on a fresh database: fetch (pages of "
            "max_messages_per_poll=200), parse, blob store, sealed MessageIngested events, "
            "cursor, read models caught up. Naive and tidings alternate (naive, then "
            f"{args.rounds} x (tidings, naive)); each side's median.",
            f"naive: imapclient (default settings) UID FETCH {BATCH} x BODY.PEEK[], "
            "BytesParser(policy=policy.default), 8 headers + get_body(plain, html)"
            ".get_content(); nothing stored. raw: imaplib UID FETCH of the same batches.",
            "memory: `tidings worker --once` child on a fresh database (SQLite / a fresh "
            "PostgreSQL schema), one account, one message; peak RSS = getrusage(RUSAGE_CHILDREN)"
            ".ru_maxrss in a small launcher process (VmHWM polled as a cross-check). Goal: at "
            "most parse_concurrency x stream_parse_mb (4 x 4 MB) above the 1 MB run.",
            f"total wall time {elapsed:.0f}s; exit status 1 when a goal is missed",
        ],
    )
    return 0 if all(line.passed is not False for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
