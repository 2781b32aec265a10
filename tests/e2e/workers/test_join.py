"""A worker joins a running fleet: the others give it its share, and it has parked a
session for each account it receives before that account is given back (login, select,
catch-up poll while the other worker still watches it), so the hand-over itself is only
IDLE. Never two sessions in IDLE for one mailbox (Dovecot's own view, sampled
throughout); the workers' logs say which sessions were parked."""

from __future__ import annotations

import logging
import time

from tests.e2e import timing
from tests.e2e.workers.harness import Fleet, Watchers
from tests.e2e.workers.servers import wait_for

log = logging.getLogger(__name__)


def test_a_joining_worker_parks_its_share_before_it_is_given(fleet: Fleet) -> None:
    hot = [fleet.connect(fleet.owner) for _ in range(12)]
    fleet.app.projections.catch_up()
    first = fleet.start_workers(2)
    watchers = Watchers(fleet.dovecot).start()
    try:
        fleet.user_active()
        fleet.settle(watchers, hot)
        assert sum(int(w.metric("tidings_accounts_owned")) for w in first) == len(hot)

        joined_wall = time.time()
        newcomer = fleet.start_worker()
        fleet.wait_ready([newcomer])

        def balanced() -> bool:
            owned = [int(w.metric("tidings_accounts_owned")) for w in (*first, newcomer)]
            return sum(owned) == len(hot) and min(owned) >= 3 and fleet.watched(watchers, hot)

        took = wait_for("the newcomer's share, all in IDLE", balanced, timing.WAIT_LONG)
        fleet.settle(watchers, hot)
        received = [
            e.fields["account_id"]
            for e in newcomer.events()
            if e.event == "watch.started" and e.at >= joined_wall
        ]
        parked = {
            e.fields["account_id"]
            for e in newcomer.events()
            if e.event == "watch.parked" and e.at >= joined_wall
        }
        log.info("join: %d received, %d parked first, %.2fs", len(received), len(parked), took)
        assert len(received) >= 3
        assert set(received) <= parked, "every account received was parked ahead"
        given = {
            e.fields["account_id"]
            for w in first
            for e in w.events()
            if e.event == "watch.stopped" and e.fields.get("reason") == "released"
        }
        assert set(received) <= given
        counts = watchers.now()
        assert all(counts[a.user] == 1 for a in hot), counts
        watchers.assert_never_twice()
    finally:
        watchers.stop()
