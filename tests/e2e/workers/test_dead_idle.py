"""A silently dead IDLE connection is noticed: one mailbox is reached through a
TCP proxy that goes silent — it stops forwarding but keeps both connections open, like a
dead NAT entry — so the worker hears neither EXISTS nor the server's "still here"
keepalives. After ``TIDINGS_WATCH_DEAD_AFTER`` it drops the connection and, once the path
works again, watches the mailbox anew; a mailbox on a healthy path, kept alive by the
server's keepalives (every second here), is never taken for dead."""

from __future__ import annotations

import time

from tests.e2e.workers.harness import OBSERVE_SLACK, Fleet, Watchers, idle_processes
from tests.e2e.workers.servers import wait_for
from tests.integration.redis.proxy import TcpProxy

DEAD_AFTER = 4.0


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
            wait_for("both mailboxes in IDLE", lambda: fleet.watched(watchers), 15)
            healthy = idle_processes(fleet.dovecot)[direct.user]
            time.sleep(DEAD_AFTER + 1)  # keepalives keep both alive past dead_after
            first = idle_processes(fleet.dovecot)
            assert first.get(direct.user) == healthy, "a healthy watch was restarted"
            [silenced] = first[behind.user]

            frozen_wall = time.time()
            proxy.frozen = True
            frozen_at = time.monotonic()
            wait_for(
                "the silent session to be dropped",
                lambda: silenced not in idle_processes(fleet.dovecot).get(behind.user, set()),
                timeout=DEAD_AFTER + 15,
                interval=0.05,
            )
            noticed = time.monotonic() - frozen_at
            silent = fleet.delays("watch.stopped", frozen_wall, [behind], reason="silent")
            dropped = silent[behind.account_id]
            print(
                f"path died -> silent watch dropped after {dropped:.2f}s, seen {noticed:.2f}s"
                f" (dead_after {DEAD_AFTER}s)"
            )
            # Not before dead_after less the last keepalive's age (< 1 s); within dead_after
            # plus the silence check's granularity (1 s) and a loaded machine's delay.
            assert DEAD_AFTER - 1.5 <= dropped <= DEAD_AFTER + 3.0
            assert DEAD_AFTER - 1.5 <= noticed <= DEAD_AFTER + 3.0 + OBSERVE_SLACK

            proxy.frozen = False
            wait_for(
                "a new IDLE session behind the proxy",
                lambda: idle_processes(fleet.dovecot).get(behind.user, set()) - {silenced},
                timeout=30,
            )
            back = time.monotonic() - frozen_at
            print(f"watched again {back:.2f}s after the path died (backoff 5 s)")
            assert idle_processes(fleet.dovecot)[direct.user] == healthy

            fleet.deliver(behind, 2, imap=True)
            took = wait_for("the new mail behind the proxy", fleet.all_ingested, 15)
            print(f"new mail behind the proxy ingested after {took:.2f}s")
            assert fleet.ingested_events() == 2
            assert "reason=silent" in fleet.workers[0].log()
            watchers.assert_never_twice()
        finally:
            watchers.stop()
    finally:
        proxy.stop()
