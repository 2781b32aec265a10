"""A worker's operator surface: ``/metrics`` and ``/healthz`` on ``--metrics-port``; SIGTERM
stops it cleanly — exit 0 within seconds, its IDLE sessions closed, its leases released
and its heartbeat withdrawn, so another worker takes its mailboxes over at its next
fleet tick instead of after a lease ttl."""

from __future__ import annotations

import functools
import logging
import time

from tests.e2e import timing
from tests.e2e.timing import OBSERVE_SLACK, TTL
from tests.e2e.workers.harness import Fleet, Watchers, Worker, idle_processes, stop_gracefully
from tests.e2e.workers.servers import wait_for

log = logging.getLogger(__name__)


def test_metrics_healthz_and_sigterm(fleet: Fleet) -> None:
    hot = [fleet.connect(fleet.owner, messages=1) for _ in range(6)]
    fleet.app.projections.catch_up()
    workers = fleet.start_workers(2)
    watchers = Watchers(fleet.dovecot).start()
    try:
        fleet.user_active()
        fleet.settle(watchers, hot)
        wait_for("the backfill", fleet.all_ingested, timing.WAIT)

        # /healthz and /metrics on each worker's port.
        owned: dict[str, int] = {}

        def idling_gauge_is_owned(worker: Worker) -> bool:
            return worker.metric("tidings_watchers", 'state="idling"') == owned[worker.name]

        for worker in workers:
            status, health = worker.healthz()
            assert status == 200 and health["ok"] is True, health
            assert health["workerId"] == worker.name
            assert health["loopAgeSeconds"] < timing.LOOP_AGE_HEALTHY
            text = worker.metrics()
            for name in (
                "tidings_accounts_owned",
                'tidings_watchers{state="idling"}',
                "tidings_leases_renewed_total",
                "tidings_imap_logins_total",
                "# TYPE tidings_messages_ingested_total counter",
                "# TYPE tidings_watch_fetch_seconds histogram",
            ):
                assert name in text, name
            owned[worker.name] = int(worker.metric("tidings_accounts_owned"))
            assert health["accountsOwned"] == owned[worker.name]
            # Gauges are updated once a loop turn (at least every second).
            wait_for(
                "the idling gauge",
                functools.partial(idling_gauge_is_owned, worker),
                timing.WAIT_QUICK,
            )
            assert worker.metric("tidings_imap_logins_total") >= owned[worker.name]
        assert sum(owned.values()) == len(hot), owned
        ingested = sum(w.metric("tidings_messages_ingested_total", 'path="poll"') for w in workers)
        ingested += sum(
            w.metric("tidings_messages_ingested_total", 'path="watch"') for w in workers
        )
        assert ingested == len(hot)
        assert workers[0].healthz()[0] == 200

        # SIGTERM the busier worker.
        leaving = max(workers, key=lambda w: owned[w.name])
        staying = next(w for w in workers if w is not leaving)
        assert owned[leaving.name] > 0
        with fleet.redis.client() as redis:
            assert redis.exists(f"tidings:worker:{leaving.name}")
        before = idle_processes(fleet.dovecot)
        term_wall = time.time()
        exited = stop_gracefully(leaving, timeout=timing.SIGTERM_WAIT)
        exit_wall = time.time()
        assert leaving.proc.returncode == 0, leaving.log()[-3000:]
        log.info("SIGTERM -> exit 0 in %.2fs", exited)
        assert exited <= timing.SIGTERM_EXIT, "a few seconds"
        # Its watches were closed before it exited (its log), and the server's sessions
        # (one imap process each) went with them; the other worker's are untouched.
        released = [
            a
            for a in hot
            if fleet.events("watch.stopped", term_wall, account_id=a.account_id, reason="shutdown")
        ]
        assert len(released) == owned[leaving.name]
        stayed = [a for a in hot if a not in released]

        def old_sessions_gone() -> bool:
            now = idle_processes(fleet.dovecot)
            return not any(before[a.user] & now.get(a.user, set()) for a in released)

        wait_for("the leaving worker's sessions to close", old_sessions_gone, OBSERVE_SLACK)
        now = idle_processes(fleet.dovecot)
        assert all(now.get(a.user) == before[a.user] for a in stayed), (before, now)
        with fleet.redis.client() as redis:
            assert not redis.exists(f"tidings:worker:{leaving.name}"), "heartbeat withdrawn"

        took = wait_for(
            "the other worker to take over", lambda: fleet.watched(watchers, hot), timing.WAIT
        )
        taken = max(fleet.delays("watch.started", exit_wall - exited, released).values())
        log.info(
            "SIGTERM -> the other worker watches the released mailboxes %.2fs later,"
            " seen %.2fs after the exit (ttl %ss)",
            taken,
            took,
            TTL,
        )
        assert taken < exited + TTL / 2, "released leases are taken at the next tick"
        assert took < TTL / 2 + OBSERVE_SLACK
        # The gauge follows once a loop turn (at least every second) after the claims.
        wait_for(
            "the staying worker's gauge to count every account",
            lambda: int(staying.metric("tidings_accounts_owned")) == len(hot),
            timing.WAIT_QUICK,
        )
        watchers.assert_never_twice()
        assert "worker.stop" in leaving.log()
    finally:
        watchers.stop()
