"""A silently dead IDLE connection is noticed: one mailbox is reached through a
TCP proxy that goes silent — it stops forwarding but keeps both connections open, like a
dead NAT entry — so the worker hears neither EXISTS nor the server's "still here"
keepalives. After ``TIDINGS_WATCH_DEAD_AFTER`` it drops the connection and, once the path
works again, watches the mailbox anew; a mailbox on a healthy path, kept alive by the
server's keepalives (every second here), is never taken for dead."""

from __future__ import annotations

import logging
import time

from tests.e2e import timing
from tests.e2e.timing import DEAD_AFTER, DEAD_AFTER_EARLY, DEAD_AFTER_LATE, OBSERVE_SLACK
from tests.e2e.workers.harness import Fleet, Watchers, idle_processes
from tests.e2e.workers.servers import wait_for
from tests.integration.redis.proxy import TcpProxy

log = logging.getLogger(__name__)


def test_silent_idle_connection_is_restarted(fleet: Fleet) -> None:
    proxy = TcpProxy((fleet.dovecot.host, fleet.dovecot.port)).start()
    try:
        behind = fleet.connect(fleet.owner, port=proxy.port)
        direct = fleet.connect(fleet.owner)
        fleet.app.projections.catch_up()
        fleet.start_workers(1, watch_dead_after=str(DEAD_AFTER))
        watchers = Watchers(fleet.dovecot).start()
        try:
            fleet.user_active()
            wait_for("both mailboxes in IDLE", lambda: fleet.watched(watchers), timing.WAIT)
            healthy = idle_processes(fleet.dovecot)[direct.user]
            time.sleep(DEAD_AFTER + timing.KEEPALIVE)  # keepalives keep both alive past dead_after
            first = idle_processes(fleet.dovecot)
            assert first.get(direct.user) == healthy, "a healthy watch was restarted"
            [silenced] = first[behind.user]

            frozen_wall = time.time()
            proxy.frozen = True
            frozen_at = time.monotonic()
            wait_for(
                "the silent session to be dropped",
                lambda: silenced not in idle_processes(fleet.dovecot).get(behind.user, set()),
                timeout=DEAD_AFTER + timing.WAIT,
                interval=timing.FAST_POLL,
            )
            noticed = time.monotonic() - frozen_at
            silent = fleet.delays("watch.stopped", frozen_wall, [behind], reason="silent")
            dropped = silent[behind.account_id]
            log.info(
                "path died -> silent watch dropped after %.2fs, seen %.2fs (dead_after %ss)",
                dropped,
                noticed,
                DEAD_AFTER,
            )
            # Not before dead_after less the last keepalive's age (< 1 s); within dead_after
            # plus the silence check's granularity (1 s) and a loaded machine's delay.
            early, late = DEAD_AFTER - DEAD_AFTER_EARLY, DEAD_AFTER + DEAD_AFTER_LATE
            assert early <= dropped <= late
            assert early <= noticed <= late + OBSERVE_SLACK

            proxy.frozen = False
            wait_for(
                "a new IDLE session behind the proxy",
                lambda: idle_processes(fleet.dovecot).get(behind.user, set()) - {silenced},
                timeout=timing.WAIT_LONG,
            )
            back = time.monotonic() - frozen_at
            log.info("watched again %.2fs after the path died (backoff 5 s)", back)
            assert idle_processes(fleet.dovecot)[direct.user] == healthy

            fleet.deliver(behind, 2, imap=True)
            took = wait_for("the new mail behind the proxy", fleet.all_ingested, timing.WAIT)
            log.info("new mail behind the proxy ingested after %.2fs", took)
            assert fleet.ingested_events() == 2
            assert "reason=silent" in fleet.workers[0].log()
            watchers.assert_never_twice()
        finally:
            watchers.stop()
    finally:
        proxy.stop()
