"""A black-holed IDLE connection is noticed: one mailbox is reached through a TCP proxy
that black-holes the connection (it stops forwarding both ways but closes nothing, like
a dead NAT entry), so the worker hears neither EXISTS nor the server's keepalives. After
``TIDINGS_WATCH_PROBE_AFTER`` of silence the watch probes (DONE + IDLE); the probe goes
unanswered, and after ``TIDINGS_WATCH_PROBE_TIMEOUT`` the connection is dropped and,
once the path works again, the mailbox is watched anew. A mailbox on a healthy path,
kept talking by the server's keepalives (every second here), is never probed away."""

from __future__ import annotations

import logging
import time

from tests.e2e import timing
from tests.e2e.timing import DEAD_EARLY, DEAD_LATE, OBSERVE_SLACK, PROBE_AFTER, PROBE_TIMEOUT
from tests.e2e.workers.harness import Fleet, Watchers, idle_processes
from tests.e2e.workers.servers import wait_for
from tests.support.blackhole_proxy import BlackholeProxy

log = logging.getLogger(__name__)


def test_black_holed_idle_connection_is_replaced(fleet: Fleet) -> None:
    with BlackholeProxy((fleet.dovecot.host, fleet.dovecot.port)) as proxy:
        behind = fleet.connect(fleet.owner, port=proxy.port)
        direct = fleet.connect(fleet.owner)
        fleet.app.projections.catch_up()
        [worker] = fleet.start_workers(
            1, watch_probe_after=str(PROBE_AFTER), watch_probe_timeout=str(PROBE_TIMEOUT)
        )
        watchers = Watchers(fleet.dovecot).start()
        try:
            fleet.user_active()
            wait_for("both mailboxes in IDLE", lambda: fleet.watched(watchers), timing.WAIT)
            healthy = idle_processes(fleet.dovecot)[direct.user]
            time.sleep(PROBE_AFTER + PROBE_TIMEOUT + timing.KEEPALIVE)
            first = idle_processes(fleet.dovecot)
            assert first.get(direct.user) == healthy, "a healthy watch was restarted"
            [silenced] = first[behind.user]

            holed_wall = time.time()
            proxy.blackhole()
            holed_at = time.monotonic()
            wait_for(
                "the black-holed session to be dropped",
                lambda: silenced not in idle_processes(fleet.dovecot).get(behind.user, set()),
                timeout=DEAD_LATE + timing.WAIT,
                interval=timing.FAST_POLL,
            )
            noticed = time.monotonic() - holed_at
            silent = fleet.delays("watch.stopped", holed_wall, [behind], reason="silent")
            dropped = silent[behind.account_id]
            log.info(
                "black-holed -> watch dropped after %.2fs, seen %.2fs (probe %ss + %ss)",
                dropped,
                noticed,
                PROBE_AFTER,
                PROBE_TIMEOUT,
            )
            assert DEAD_EARLY <= dropped <= DEAD_LATE
            assert DEAD_EARLY <= noticed <= DEAD_LATE + OBSERVE_SLACK
            wait_for(  # the metrics are updated every second
                "the unanswered probe counted",
                lambda: worker.metric("tidings_watch_probes_total", 'outcome="unanswered"') == 1,
                timing.WAIT_QUICK,
            )

            proxy.restore()
            wait_for(
                "a new IDLE session behind the proxy",
                lambda: idle_processes(fleet.dovecot).get(behind.user, set()) - {silenced},
                timeout=timing.WAIT_LONG,
            )
            back = time.monotonic() - holed_at
            log.info("watched again %.2fs after the path died (backoff 5 s)", back)
            assert idle_processes(fleet.dovecot)[direct.user] == healthy

            fleet.deliver(behind, 2, imap=True)
            took = wait_for("the new mail behind the proxy", fleet.all_ingested, timing.WAIT)
            log.info("new mail behind the proxy ingested after %.2fs", took)
            assert fleet.ingested_events() == 2
            assert "reason=silent" in worker.log()
            watchers.assert_never_twice()
        finally:
            watchers.stop()
