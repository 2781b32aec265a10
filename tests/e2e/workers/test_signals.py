"""Account changes reach the owning worker by pub/sub: disconnect tears the
watch down within 5 s and reconnect brings it back within 5 s; ``sync-account-now`` and a
new connect get the account polled (its waiting mail ingested) and watched within 5 s.

The periodic poll is slowed to a minute here, so nothing but the signal explains work
done within 5 s."""

from __future__ import annotations

import logging
import time

from tests.e2e import timing
from tests.e2e.timing import OBSERVE_SLACK, SIGNAL_BOUND
from tests.e2e.workers.harness import Account, Fleet, Watchers, all_sessions
from tests.e2e.workers.servers import wait_for

log = logging.getLogger(__name__)


def assert_worker_times(fleet: Fleet, account: Account, since: float, ingested: int) -> None:
    """A worker ingested the account's waiting mail (its poll, or the watch's catch-up
    poll — whichever came first) and watches it, within 5 s."""
    synced = [
        e
        for e in fleet.events("sync.ok", since, account_id=account.account_id)
        if e.fields["ingested"] != "0"
    ]
    assert sum(int(e.fields["ingested"]) for e in synced) == ingested, synced
    polled = synced[-1].at - since
    [watching] = fleet.delays("watch.started", since, [account]).values()
    log.info("  worker: polled %.2fs, watch started %.2fs", polled, watching)
    assert polled <= SIGNAL_BOUND
    assert watching <= SIGNAL_BOUND


def test_disconnect_reconnect_sync_now_and_connect(fleet: Fleet) -> None:
    fleet.worker_settings.update(poll_interval=timing.SLOW_POLL)
    hot = [fleet.connect(fleet.owner) for _ in range(4)]
    quiet = fleet.connect(fleet.member("other"))  # warm: polled, not watched
    fleet.app.projections.catch_up()
    fleet.start_workers(2)
    watchers = Watchers(fleet.dovecot).start()
    try:
        fleet.user_active()
        fleet.settle(watchers, hot)  # also: the first-sight polls (spread over 2 s) are over
        target = hot[0]

        # disconnect: the watch is torn down, and nothing polls the account any more.
        started, wall = time.monotonic(), time.time()
        fleet.write("disconnect-mail-account", {"accountId": target.account_id}, fleet.owner)
        wait_for(
            "the disconnected mailbox's session to close",
            lambda: all_sessions(fleet.dovecot)[target.user] == 0,
            timeout=timing.WAIT,
            interval=timing.FAST_POLL,
        )
        gone = time.monotonic() - started
        [stopped] = fleet.delays("watch.stopped", wall, [target], reason="deactivated").values()
        log.info("disconnect -> watch stopped %.2fs, session gone %.2fs", stopped, gone)
        assert stopped <= SIGNAL_BOUND
        assert gone <= SIGNAL_BOUND + OBSERVE_SLACK
        time.sleep(timing.QUIET_CHECK)
        assert all_sessions(fleet.dovecot)[target.user] == 0, "nothing logs in again"
        assert fleet.watched(watchers, hot[1:])

        # reconnect: watched again (connect/reconnect make the account hot).
        started, wall = time.monotonic(), time.time()
        fleet.write("reconnect-mail-account", {"accountId": target.account_id}, fleet.owner)
        wait_for(
            "the reconnected mailbox in IDLE",
            lambda: fleet.watched(watchers, [target]),
            timing.WAIT,
        )
        back = time.monotonic() - started
        [watching] = fleet.delays("watch.started", wall, [target]).values()
        log.info("reconnect -> watch started %.2fs, seen in IDLE %.2fs", watching, back)
        assert watching <= SIGNAL_BOUND
        assert back <= SIGNAL_BOUND + OBSERVE_SLACK

        # sync-account-now on a warm account: polled (its new mail ingested) and watched.
        fleet.deliver(quiet, 3)
        started, wall = time.monotonic(), time.time()
        fleet.write("sync-account-now", {"accountId": quiet.account_id}, fleet.admin)
        wait_for(
            "sync-account-now's poll",
            lambda: fleet.message_counts()[quiet.account_id] == 3,
            timeout=timing.WAIT,
        )
        polled = time.monotonic() - started
        wait_for(
            "the synced mailbox in IDLE", lambda: fleet.watched(watchers, [quiet]), timing.WAIT
        )
        watched = time.monotonic() - started
        assert_worker_times(fleet, quiet, wall, ingested=3)
        log.info("sync-account-now -> seen polled %.2fs, in IDLE %.2fs", polled, watched)
        assert polled <= SIGNAL_BOUND + OBSERVE_SLACK
        assert watched <= SIGNAL_BOUND + OBSERVE_SLACK

        # A new connect while the workers run: polled (pre-delivered mail) and watched.
        started, wall = time.monotonic(), time.time()
        new = fleet.connect(fleet.owner, messages=4)
        wait_for(
            "the new account's first poll",
            lambda: fleet.message_counts()[new.account_id] == 4,
            timeout=timing.WAIT,
        )
        polled = time.monotonic() - started
        wait_for("the new mailbox in IDLE", lambda: fleet.watched(watchers, [new]), timing.WAIT)
        watched = time.monotonic() - started
        assert_worker_times(fleet, new, wall, ingested=4)
        log.info("connect -> seen polled %.2fs, in IDLE %.2fs", polled, watched)
        assert polled <= SIGNAL_BOUND + OBSERVE_SLACK
        assert watched <= SIGNAL_BOUND + OBSERVE_SLACK

        assert fleet.ingested_events() == sum(a.delivered for a in fleet.accounts)
        watchers.assert_never_twice()
    finally:
        watchers.stop()
