"""Several ``tidings worker`` processes share the hot accounts: each hot mailbox is in IDLE
exactly once (Dovecot's own view), and after a worker is killed its mailboxes are
watched again by the others within ttl + one fleet tick, never twice at once, with the
mail that arrived meanwhile ingested."""

from __future__ import annotations

import logging
import time

from tests.e2e import timing
from tests.e2e.timing import FLEET_TICK, LOGIN, OBSERVE_SLACK, TTL
from tests.e2e.workers.harness import Fleet, Watchers
from tests.e2e.workers.servers import wait_for

log = logging.getLogger(__name__)


def test_hot_accounts_watched_once_and_taken_over_after_kill(fleet: Fleet) -> None:
    # Connected before any worker runs: no connect signal reaches a worker, so only
    # user-active makes them hot. The owner's own accounts and the tenant's shared ones
    # are promoted; another member's are not (warm: polled, no socket).
    hot = [fleet.connect(fleet.owner) for _ in range(10)] + [fleet.connect() for _ in range(2)]
    warm = [fleet.connect(fleet.member("other")) for _ in range(2)]
    fleet.app.projections.catch_up()
    workers = fleet.start_workers(3)
    watchers = Watchers(fleet.dovecot).start()
    try:
        time.sleep(timing.FIRST_TICKS)  # first fleet ticks and first-sight polls
        assert sum(watchers.now().values()) == 0, "nothing is hot before user-active"

        active_at = time.time()
        fleet.user_active()
        promoted = wait_for(
            "hot mailboxes in IDLE", lambda: fleet.watched(watchers, hot), timing.WAIT_HOT
        )
        started = max(fleet.delays("watch.started", active_at, hot).values())
        log.info(
            "user-active -> %d watches started %.2fs, seen %.2fs", len(hot), started, promoted
        )
        assert started <= timing.HOT_BOUND, "hot within 5 s of user-active"
        assert promoted <= timing.HOT_BOUND + OBSERVE_SLACK

        # Settled: every sample for ~10 s shows each hot mailbox in IDLE exactly once.
        fleet.settle(watchers, hot)
        deadline, samples = time.monotonic() + timing.STEADY, 0
        while time.monotonic() < deadline:
            counts = watchers.now()
            assert {a.user: counts[a.user] for a in hot} == {a.user: 1 for a in hot}, counts
            assert all(counts[a.user] == 0 for a in warm), counts
            samples += 1
            time.sleep(timing.SAMPLE)
        owned = [int(w.metric("tidings_accounts_owned")) for w in workers]
        log.info("steady: %d samples, accounts owned per worker %s", samples, owned)
        assert sum(owned) == len(hot)
        assert all(n > 0 for n in owned), "every worker takes a share"

        # kill -9 the busiest worker: the kernel closes its sockets, its leases run out.
        victim = max(workers, key=lambda w: w.metric("tidings_accounts_owned"))
        before = watchers.now()
        killed_wall = time.time()
        victim.kill()
        killed_at = time.monotonic()
        wait_for(
            "the victim's sessions to close",
            lambda: sum(watchers.now().values()) < len(hot),
            timeout=timing.WAIT_QUICK,
            interval=timing.FAST_POLL,
        )
        time.sleep(timing.AFTER_KILL)
        now = watchers.now()
        orphans = [a for a in hot if before[a.user] == 1 and now[a.user] == 0]
        assert len(orphans) == int(max(owned)), (owned, now)
        for account in orphans:  # mail arriving while nobody watches
            fleet.deliver(account, 2, imap=True)

        wait_for(
            "orphaned mailboxes in IDLE again",
            lambda: fleet.watched(watchers, hot),
            timeout=TTL + FLEET_TICK + timing.WAIT_FAILOVER_EXTRA,
        )
        failover = time.monotonic() - killed_at
        restarted = max(fleet.delays("watch.started", killed_wall, orphans).values())
        log.info(
            "kill -9 -> orphans' watches started %.2fs, seen %.2fs (ttl %ss, tick %ss)",
            restarted,
            failover,
            TTL,
            FLEET_TICK,
        )
        assert restarted <= TTL + FLEET_TICK + LOGIN, "ttl + one tick"
        assert failover <= TTL + FLEET_TICK + LOGIN + OBSERVE_SLACK
        # The survivors logged in while the leases ran out (a parked session each, no
        # IDLE), so at the lapse only IDLE was left; one survivor per orphan did so.
        parked = fleet.delays("watch.parked", killed_wall, orphans)
        watched = fleet.delays("watch.started", killed_wall, orphans)
        assert all(parked[a] <= watched[a] for a in parked), (parked, watched)
        for account in orphans:
            assert (
                len(fleet.events("watch.parked", killed_wall, account_id=account.account_id)) == 1
            )

        took = wait_for(
            "the mail that arrived meanwhile", fleet.all_ingested, timeout=timing.WAIT_FAILOVER_MAIL
        )
        log.info("orphans' mail listed %.2fs after failover", took)
        assert fleet.ingested_events() == sum(a.delivered for a in fleet.accounts)
        time.sleep(timing.STEADY_AFTER)  # a little more of the new steady state
        counts = watchers.now()
        assert all(counts[a.user] == 1 for a in hot), counts
        watchers.assert_never_twice()
        log.info("%d background samples, never twice in IDLE", watchers.samples)
    finally:
        watchers.stop()
