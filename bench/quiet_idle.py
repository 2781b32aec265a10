"""Quiet IDLE without keepalives: logins and push latency across a long silence.

    python bench/quiet_idle.py [--accounts 50] [--quiet 600] [--quick]

Some servers send nothing at all during IDLE while a mailbox is quiet. Against a
private Dovecot with its "still here" keepalive off (``imap_idle_notify_interval`` far
beyond the run), one ``tidings worker`` (PostgreSQL + a private redis-server) watches
N hot accounts through ``--quiet`` seconds of silence with the default probe settings
(``watch_probe_after`` 240 s, ``watch_probe_timeout`` 30 s), then one message is
APPENDed to each mailbox in turn. Reported:

- logins per account during the quiet period, counted on the server's side (Dovecot's
  own ``Login: user=<...>`` log lines), and the distinct IDLE session processes each
  account had (its process titles, sampled every second). Goal: 1 each — the first
  login only, no reconnect. The poll interval is set beyond the run, so the hot
  accounts' secondary poll (its own login) does not blur the count.
- push latency after the quiet period: APPEND -> ``list-messages`` shows it, median
  and p99. Goal: within 1 s of Dovecot's fixed ~0.5 s push delay (median <= 1.0 s).

``--quick``: 10 accounts, 30 s of silence (a smoke run; no probe happens).
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
import threading
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imapclient import IMAPClient

from application import User
from bench._common import environment, median, percentile, say
from bench._common import scratch_database as scratch_db
from bench._mail import (
    Line,
    dovecot_extra,
    idle_users,
    mail,
    open_app,
    private_redis,
    raise_inotify,
    report,
    settings_for,
    wait_until,
    worker_env,
)
from bench.watch import Fleet, hot, seed_accounts
from infrastructure.devkit.dovecot import DovecotServer

_TITLE = re.compile(r"dovecot/imap \[(\S+) \S+ IDLE")
QUIET_DOVECOT = "imap_idle_notify_interval = 1 hours\n"  # no keepalive within a run


def sessions_sampler(
    server: DovecotServer, stop: threading.Event, seen: dict[str, set[int]]
) -> threading.Thread:
    """Every second: which IDLE session processes each user has (pid per login)."""

    def run() -> None:
        while not stop.is_set():
            for pid, title in server.imap_processes().items():
                match = _TITLE.search(title)
                if match:
                    seen.setdefault(match.group(1), set()).add(pid)
            stop.wait(1.0)

    thread = threading.Thread(target=run, name="sampler", daemon=True)
    thread.start()
    return thread


def logins(log: Path, offset: int) -> dict[str, int]:
    text = log.read_bytes()[offset:].decode(errors="replace")
    found: dict[str, int] = {}
    for user in re.findall(r"Login: user=<([^>]+)>", text):
        found[user] = found.get(user, 0) + 1
    return found


def probes(port: int) -> dict[str, float]:
    """The worker's ``tidings_watch_probes_total`` by outcome (its /metrics)."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found = dict.fromkeys(("sent", "answered", "unanswered"), 0.0)
    for outcome, value in re.findall(
        r'^tidings_watch_probes_total\{outcome="(\w+)"\} (\S+)$', text, re.M
    ):
        found[outcome] = float(value)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, help="watched accounts (50; quick 10)")
    parser.add_argument("--quiet", type=float, help="seconds of silence (600; quick 30)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n = args.accounts or (10 if args.quick else 50)
    quiet = args.quiet or (30.0 if args.quick else 600.0)
    raise_inotify(max(1024, n + 256))
    lines: list[Line] = []
    extra = dovecot_extra(2 * n + 100) + QUIET_DOVECOT
    with (
        DovecotServer(extra_config=extra) as server,
        private_redis() as redis_url,
        scratch_db("postgresql", "quiet") as scratch,
    ):
        settings = settings_for(scratch.url, scratch.workdir / "blobs", redis_url=redis_url)
        app = open_app(settings)
        env = worker_env(
            settings,
            TIDINGS_POLL_INTERVAL=str(quiet * 10),
            TIDINGS_PER_HOST_CONN_CAP=str(n + 100),
        )
        fleet = Fleet(settings, scratch.workdir, env)
        try:
            accounts = seed_accounts(server, app, settings, n)
            worker = fleet.start("quiet")
            hot(app, accounts.users)
            wait_until(
                lambda: all(idle_users(server).get(b.name, 0) >= 1 for b in accounts.boxes),
                120,
                0.2,
                "every account in IDLE",
            )
            offset = server.log_path.stat().st_size
            first = logins(server.log_path, 0)
            if any(first.get(b.name, 0) < 1 for b in accounts.boxes):  # the count would lie
                raise RuntimeError("Dovecot's log shows no login lines to count")
            # Logins of the first watch are before ``offset``; count the quiet period's.
            stop, seen = threading.Event(), dict[str, set[int]]()
            sampler = sessions_sampler(server, stop, seen)
            say(f"quiet: {n} accounts in IDLE, {quiet:.0f} s of silence")
            time.sleep(quiet)
            stop.set()
            sampler.join()
            time.sleep(1.5)  # the worker's metrics are updated every second
            probed = probes(worker.metrics_port)
            during = logins(server.log_path, offset)
            reconnects = [during.get(b.name, 0) for b in accounts.boxes]
            pids = [len(seen.get(b.name, set())) for b in accounts.boxes]
            say(f"after the silence: reconnect logins {sum(reconnects)}, sessions {pids[:5]}...")
            latencies: list[float] = []
            for i, (box, user, account) in enumerate(
                zip(accounts.boxes, accounts.users, accounts.ids, strict=True)
            ):
                subject = f"quiet {i} {secrets.token_hex(4)}"
                client = IMAPClient(server.host, server.port, ssl=False, timeout=30)
                client.login(box.name, box.password)
                start = time.perf_counter()
                client.append("INBOX", mail(i, subject))
                client.logout()

                def shown(account: str = account, user: User = user, s: str = subject) -> bool:
                    result = app.query("list-messages", {"accountId": account, "limit": 5}, user)
                    return any(it["subject"] == s for it in (result.data or {}).get("items", []))

                wait_until(shown, 60, 0.01, "the message")
                latencies.append(time.perf_counter() - start)
            with_logins = [c + 1 for c in reconnects]  # the first login plus the quiet's
            lines += [
                Line(
                    f"logins per account over {quiet:.0f} s of quiet IDLE (server log)",
                    "postgresql",
                    f"max {max(with_logins)}, mean {sum(with_logins) / n:.2f}",
                    "1",
                    "-",
                    "1 each",
                    max(with_logins) == 1,
                ),
                Line(
                    "IDLE sessions per account (process titles, sampled 1/s)",
                    "postgresql",
                    f"max {max(pids)}",
                    "1",
                    "-",
                    "1 each",
                    max(pids) == 1,
                ),
                Line(
                    "liveness probes during the quiet period (worker metrics)",
                    "postgresql",
                    f"{probed['answered']:.0f} answered of {probed['sent']:.0f} sent, "
                    f"{probed['unanswered']:.0f} unanswered",
                    "-",
                    "-",
                    "none unanswered",
                    probed["unanswered"] == 0,
                ),
                Line(
                    "push after the quiet period: APPEND -> queryable, median",
                    "postgresql",
                    f"{median(latencies) * 1000:.0f} ms",
                    "~500 ms (Dovecot's push delay)",
                    "-",
                    "<= 1000 ms",
                    median(latencies) <= 1.0,
                ),
                Line(
                    "push after the quiet period: APPEND -> queryable, p99",
                    "postgresql",
                    f"{percentile(latencies, 99) * 1000:.0f} ms",
                    "~503 ms",
                    "-",
                    "-",
                    None,
                ),
            ]
        finally:
            fleet.stop_all()
            app.close()
    report(
        f"quiet IDLE, keepalives off: {n} accounts, {quiet:.0f} s, default probe settings",
        lines,
        [*environment(["postgresql"]), "IMAP: private Dovecot 2.3, imap_idle_notify_interval 1 h"],
        notes=["logins: the first watch's login plus every login during the quiet period"],
    )
    return 0 if all(line.passed is not False for line in lines) else 1


if __name__ == "__main__":
    raise SystemExit(main())
