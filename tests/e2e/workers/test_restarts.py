"""The servers restart under running workers: a private PostgreSQL cluster, then Dovecot
(same port, configuration and mail). The workers recover on their own; every message
delivered meanwhile is ingested exactly once; and there is no login storm — counted on
the server's side (Dovecot's log: one ``Login:`` line per IMAP login) and matched by the
workers' ``tidings_imap_logins_total``.

- PostgreSQL down (longer than the pools wait for a connection): an IDLE watch that
  hears of new mail cannot ingest it; it keeps its session (a failed ingest
  leaves the watcher running) and the mail is fetched later from the unchanged cursor;
  the supervisor's loop keeps renewing the leases meanwhile.
- Dovecot down: every session is cut; each watch comes back after its backoff (5 s
  first), with one login, and its catch-up ingests what arrived meanwhile.

The scheduled poll is slowed to a minute, so each login in the window is a watch's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import timing
from tests.e2e.timing import LOGIN, OBSERVE_SLACK, PG_DOWN, WORKER_SETTINGS
from tests.e2e.workers.harness import Fleet, Watchers, idle_processes
from tests.e2e.workers.servers import PostgresCluster, RedisServer, running_cluster, wait_for
from tests.support.dovecot import DovecotServer

ACCOUNTS = 4
log = logging.getLogger(__name__)


@pytest.fixture
def cluster() -> Iterator[PostgresCluster]:
    yield from running_cluster()


@pytest.fixture
def restart_fleet(
    tmp_path: Path, dovecot: DovecotServer, redis_server: RedisServer, cluster: PostgresCluster
) -> Iterator[Fleet]:
    settings = {**WORKER_SETTINGS, "poll_interval": timing.SLOW_POLL}
    world = Fleet(tmp_path, dovecot, redis_server, cluster.url("w"), settings)
    try:
        yield world
    finally:
        world.close()
        log.info("worker and dovecot logs:\n%s", world.logs())


def logins(fleet: Fleet) -> float:
    return sum(w.metric("tidings_imap_logins_total") for w in fleet.workers)


def test_postgres_and_dovecot_restarts(restart_fleet: Fleet, cluster: PostgresCluster) -> None:
    fleet = restart_fleet
    hot = [fleet.connect(fleet.owner, messages=1) for _ in range(ACCOUNTS)]
    fleet.app.projections.catch_up()
    fleet.start_workers(2)
    watchers = Watchers(fleet.dovecot).start()
    try:
        fleet.user_active()
        fleet.settle(watchers, hot)  # also: the first-sight polls (spread over 2 s) are over
        wait_for("the backfill", fleet.all_ingested, timing.WAIT)
        window_start, offset, logins_before = time.monotonic(), fleet.log_offset(), logins(fleet)
        sessions = idle_processes(fleet.dovecot)

        # PostgreSQL down while new mail arrives: the watches hear EXISTS, cannot ingest.
        cluster.stop("fast")
        for account in hot:
            fleet.deliver(account, 2)
        time.sleep(PG_DOWN)
        assert all(w.alive for w in fleet.workers)
        ages = [w.healthz()[1]["loopAgeSeconds"] for w in fleet.workers]
        assert all(age < timing.LOOP_AGE_IN_OUTAGE for age in ages), (
            "the loop keeps turning",
            ages,
        )
        assert not any("lease." in w.log() for w in fleet.workers), "no lease lapsed"
        alive = idle_processes(fleet.dovecot, idle_only=False)
        assert all(sessions[a.user] <= alive.get(a.user, set()) for a in hot), (
            "the watches keep their sessions through the database outage",
            sessions,
            alive,
        )
        cluster.start()
        # More mail: the watch fetches from its unchanged cursor, the earlier two included.
        pg_back = time.monotonic()
        for account in hot:
            fleet.deliver(account, 1)
        wait_for(
            "everything after the PostgreSQL restart", fleet.all_ingested, timing.WAIT_AFTER_PG
        )
        log.info("PostgreSQL back -> all mail ingested after %.2fs", time.monotonic() - pg_back)
        wait_for(
            "the same sessions back in IDLE",
            lambda: all(idle_processes(fleet.dovecot).get(a.user) == sessions[a.user] for a in hot),
            timeout=timing.WAIT,
        )

        # Dovecot down: sessions cut; mail lands in the maildirs meanwhile.
        halt_wall = time.time()
        fleet.dovecot.halt()  # returns once every session is cut
        halted = time.monotonic()
        for account in hot:
            fleet.deliver(account, 1)
        time.sleep(timing.DOVECOT_DOWN)
        fleet.dovecot.resume()
        log.info("Dovecot down for %.2fs", time.monotonic() - halted)
        wait_for(
            "mailboxes in IDLE after the Dovecot restart",
            lambda: fleet.watched(watchers, hot),
            timing.WAIT_LONG,
        )
        back = time.monotonic() - halted
        cut = fleet.delays("watch.stopped", halt_wall, hot, reason="closed")
        restarted = fleet.delays("watch.started", halt_wall, hot)
        gaps = [restarted[a] - cut[a] for a in cut]
        log.info(
            "Dovecot restart -> watches restarted %.2f-%.2fs after the cut;"
            " all seen in IDLE %.2fs after the halt returned",
            min(gaps),
            max(gaps),
            back,
        )
        assert max(gaps) <= timing.BACKOFF_FIRST_MAX + LOGIN, (
            "one backoff step (5 s, +20% jitter) and a login"
        )
        assert min(gaps) >= timing.BACKOFF_FIRST, "no reconnect before the backoff's base delay"
        assert back <= timing.BACKOFF_FIRST_MAX + LOGIN + OBSERVE_SLACK
        wait_for("the mail delivered while Dovecot was down", fleet.all_ingested, timing.WAIT)
        assert fleet.ingested_events() == sum(a.delivered for a in fleet.accounts)
        assert all(w.alive for w in fleet.workers)
        time.sleep(timing.STORM_WATCH)  # a storm would show in the next seconds

        minutes = (time.monotonic() - window_start) / 60
        counted = fleet.dovecot_logins(offset)
        per_account = {a.user: counted[a.user] for a in hot}
        worker_logins = logins(fleet) - logins_before
        log.info(
            "logins over %.0fs: %s (max %.1f/account/min); workers counted %.0f",
            minutes * 60,
            per_account,
            max(per_account.values()) / minutes,
            worker_logins,
        )
        assert worker_logins == sum(counted.values())
        # One re-login per watch for the Dovecot restart, none for the PostgreSQL one: a
        # storm would be dozens. The window is under a minute, so this is also the
        # "fewer than 3 logins per account per minute" bound.
        assert minutes < timing.LOGIN_STORM_WINDOW_MINUTES
        assert all(n < 3 for n in per_account.values()), per_account
        watchers.assert_never_twice()
    finally:
        watchers.stop()
