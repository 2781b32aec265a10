"""Redis goes away (the private one is killed): the workers can no longer renew their
leases, so within a ttl every watch stands down (nobody may watch without a lease); the
poll path does not need Redis and keeps ingesting new mail meanwhile. Redis back (same
port, empty): the workers heartbeat, claim and watch again, and their signal
subscriptions resume."""

from __future__ import annotations

import logging
import time

from tests.e2e import timing
from tests.e2e.timing import OBSERVE_SLACK, POLL, TTL
from tests.e2e.workers.harness import Fleet, Watchers, all_sessions
from tests.e2e.workers.servers import wait_for

log = logging.getLogger(__name__)


def test_watches_stand_down_without_redis_and_come_back(fleet: Fleet) -> None:
    hot = [fleet.connect(fleet.owner) for _ in range(4)]
    fleet.app.projections.catch_up()
    fleet.start_workers(2)
    watchers = Watchers(fleet.dovecot).start()
    try:
        fleet.user_active()
        fleet.settle(watchers, hot)

        killed_wall = time.time()
        fleet.redis.kill()
        killed_at = time.monotonic()
        wait_for(
            "every watch to stand down",
            lambda: sum(watchers.now()[a.user] for a in hot) == 0,
            timeout=TTL + timing.WAIT,
            interval=timing.FAST_POLL,
        )
        stood_down = time.monotonic() - killed_at
        expired = fleet.delays("lease.expired", killed_wall, hot)
        log.info(
            "Redis killed -> leases given up after %.2f-%.2fs,"
            " no IDLE session seen after %.2fs (ttl %ss)",
            min(expired.values()),
            max(expired.values()),
            stood_down,
            TTL,
        )
        # Given up a margin (ttl/10) before the lease's validity ends, so before anyone
        # else could hold it; not before a renewal (every ttl/3) had a chance to fail.
        assert max(expired.values()) <= TTL, "renew errors spanning a ttl"
        assert min(expired.values()) >= TTL / 3
        assert stood_down <= TTL + OBSERVE_SLACK

        # Mail arriving now is polled in (each worker polls everything while the fleet
        # is unknown; dedup keeps that exactly once).
        for account in hot:
            fleet.deliver(account, 2)
        took = wait_for(
            "mail polled in without Redis", fleet.all_ingested, timeout=POLL + timing.WAIT
        )
        log.info("mail ingested by the poll path without Redis after %.2fs", took)
        assert all(w.alive for w in fleet.workers)
        assert sum(watchers.now()[a.user] for a in hot) == 0, "still nobody watches"
        for account in hot:  # more mail while Redis is still down
            fleet.deliver(account, 1)

        fleet.redis.start()  # same port, empty
        restarted_at, restarted_wall = time.monotonic(), time.time()
        wait_for(
            "hot mailboxes in IDLE again", lambda: fleet.watched(watchers, hot), TTL + timing.WAIT
        )
        back = time.monotonic() - restarted_at
        watching = max(fleet.delays("watch.started", restarted_wall, hot).values())
        log.info("Redis back -> watches started %.2fs, seen in IDLE %.2fs", watching, back)
        assert watching <= TTL, "claims resume at the next fleet ticks"
        assert back <= TTL + OBSERVE_SLACK
        wait_for(
            "the mail that came while Redis was down", fleet.all_ingested, POLL + timing.WAIT
        )
        assert fleet.ingested_events() == sum(a.delivered for a in fleet.accounts)

        # The signal subscriptions came back too: a disconnect tears its watch down.
        wait_for(
            "subscriptions to resume", lambda: fleet.redis.subscribers() == 2, timing.WAIT_LONG
        )
        target = hot[0]
        started, wall = time.monotonic(), time.time()
        fleet.write("disconnect-mail-account", {"accountId": target.account_id}, fleet.owner)
        wait_for(
            "the disconnected mailbox's sessions to close",
            lambda: all_sessions(fleet.dovecot)[target.user] == 0,
            timeout=timing.WAIT,
            interval=timing.FAST_POLL,
        )
        gone = time.monotonic() - started
        [stopped] = fleet.delays("watch.stopped", wall, [target], reason="deactivated").values()
        log.info("after the outage: disconnect -> watch stopped %.2fs, gone %.2fs", stopped, gone)
        assert stopped <= timing.SIGNAL_BOUND
        assert gone <= timing.SIGNAL_BOUND + OBSERVE_SLACK
        watchers.assert_never_twice()
    finally:
        watchers.stop()
