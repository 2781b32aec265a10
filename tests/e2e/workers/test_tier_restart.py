"""A whole fleet restarts (every deploy) and nobody is active since: the accounts that
were hot are in IDLE again within one fleet tick of the new workers' start — plus the
lease ttl after a kill -9, whose leases must lapse first — and the warm ones are not.
Tier state is the fleet's, not a worker's: user activity in Redis (keys with the
user-active window as TTL), recent mail in the read model.

Hot before the restart: a user's own accounts and the tenant's shared one (by
``user-active``), and another member's accounts with mail that just arrived (by recent
mail). Warm: a third member's accounts, no mail, nobody active. Judged from the server's
side (Dovecot's process titles), with the workers' own log times for the bound; the
scheduled poll is slowed to a minute, so no poll can explain a watch."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time

import pytest

from tests.e2e import timing
from tests.e2e.process import ROOT, cli_env, command
from tests.e2e.timing import FLEET_TICK, LOGIN, OBSERVE_SLACK, TTL
from tests.e2e.workers.harness import Account, Fleet, Watchers, all_sessions, stop_gracefully
from tests.e2e.workers.servers import wait_for
from tests.support.results import ok

log = logging.getLogger(__name__)


def tiers_listed(fleet: Fleet, hot: list[Account], warm: list[Account]) -> bool:
    """``list-mail-accounts`` shows the hot ones watched and hot, the warm ones idle."""
    rows = {
        row["accountId"]: (row["watchState"], row["tier"])
        for row in ok(fleet.app.query("list-mail-accounts", {}, fleet.admin))["items"]
    }
    return shown(rows, hot, warm)


def shown(rows: dict[str, tuple[str, str]], hot: list[Account], warm: list[Account]) -> bool:
    return all(rows[a.account_id] == ("watching", "hot") for a in hot) and all(
        rows[a.account_id] == ("idle", "warm") for a in warm
    )


def cli_tiers(fleet: Fleet) -> dict[str, tuple[str, str]]:
    """``tidings accounts list --json``: account id -> (watchState, tier)."""
    env = cli_env(
        database_url=fleet.database_url,
        redis_url=fleet.redis.url,
        blob_dir=str(fleet.blob_dir),
        master_key=fleet.master_key,
    )
    done = subprocess.run(
        command("accounts", "list", "--json"),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timing.PROCESS,
        check=True,
    )
    items = json.loads(done.stdout)["items"]
    return {i["accountId"]: (i["watchState"], i["tier"]) for i in items}


@pytest.mark.parametrize("stop", ["sigterm", "kill"])
def test_hot_accounts_are_hot_again_after_the_whole_fleet_restarts(fleet: Fleet, stop: str) -> None:
    fleet.worker_settings["poll_interval"] = timing.SLOW_POLL
    by_activity = [fleet.connect(fleet.owner) for _ in range(3)] + [fleet.connect()]
    mailer = fleet.member("mailer")
    by_mail = [fleet.connect(mailer, messages=1) for _ in range(2)]
    warm = [fleet.connect(fleet.member("quiet")) for _ in range(2)]
    hot = by_activity + by_mail
    fleet.app.projections.catch_up()
    first = fleet.start_workers(2)
    watchers = Watchers(fleet.dovecot).start()
    try:
        fleet.user_active()
        fleet.settle(watchers, hot)  # the mail is ingested by the first-sight polls
        wait_for("the recent mail", fleet.all_ingested, timing.WAIT)
        assert all(watchers.now()[a.user] == 0 for a in warm)
        wait_for("the tiers listed", lambda: tiers_listed(fleet, hot, warm), timing.WAIT)

        for worker in first:
            if stop == "sigterm":
                stop_gracefully(worker, timing.SIGTERM_WAIT)
            else:
                worker.proc.send_signal(signal.SIGKILL)
        for worker in first:
            worker.kill()  # reaped
        wait_for(
            "every session closed",
            lambda: sum(all_sessions(fleet.dovecot).values()) == 0,
            timing.WAIT_QUICK,
            interval=timing.FAST_POLL,
        )

        spawned_wall, spawned = time.time(), time.monotonic()
        second = [fleet.start_worker(), fleet.start_worker()]
        bound = FLEET_TICK + LOGIN + (TTL if stop == "kill" else 0.0)
        seen = wait_for(
            "the hot mailboxes in IDLE again",
            lambda: fleet.watched(watchers, hot),
            timeout=timing.WORKERS_READY + bound + timing.WAIT_FAILOVER_EXTRA,
            interval=timing.FAST_POLL,
        )
        all_hot = time.monotonic() - spawned
        started_at = min(e.at for e in fleet.events("worker.start", spawned_wall))
        watched = fleet.delays("watch.started", spawned_wall, hot)
        from_start = max(spawned_wall + d for d in watched.values()) - started_at
        log.info(
            "%s: restart -> all %d hot in IDLE %.2fs after spawning (seen %.2fs), %.2fs"
            " after the first worker's loop started (tick %.1fs, ttl %.1fs)",
            stop,
            len(hot),
            all_hot,
            seen,
            from_start,
            FLEET_TICK,
            TTL,
        )
        assert from_start <= bound, (stop, from_start, bound)
        seen_from_start = spawned_wall + all_hot - started_at
        assert seen_from_start <= bound + OBSERVE_SLACK, (stop, seen_from_start, bound)

        # The new workers started up to a second apart: the first may have claimed every
        # hot account and be handing some back to the second. An account is without a
        # session for a moment then, so "exactly one each" is checked once the shares
        # hold still (the sampler checks "never two" throughout).
        fleet.wait_ready(second)  # their /healthz tells their shares
        fleet.settle(watchers, hot)
        time.sleep(timing.QUIET_CHECK)
        counts = watchers.now()
        assert all(counts[a.user] == 1 for a in hot), counts
        assert all(counts[a.user] == 0 for a in warm), ("the warm ones stay warm", counts)
        wait_for("the tiers listed again", lambda: tiers_listed(fleet, hot, warm), timing.WAIT)
        assert shown(cli_tiers(fleet), hot, warm), "tidings accounts list agrees"
        for account in warm:  # polled (first sight), never watched
            assert not fleet.events("watch.started", spawned_wall, account_id=account.account_id)
        assert all(w.alive for w in second)
        watchers.assert_never_twice()
    finally:
        watchers.stop()


def activity_keys(fleet: Fleet) -> int:
    with fleet.redis.client() as client:
        return len(list(client.scan_iter(match="tidings:active:*", count=1000)))


def test_activity_outlives_redis_restarting_empty_and_then_the_fleet(fleet: Fleet) -> None:
    """Redis comes back without its data at once (a failover to a replica behind, a
    cache-mode Redis) while the workers still know who was active: they write it back, so
    the fleet restarted after that keeps the active users' accounts hot without new
    activity. The leases Redis forgot are granted again only after a ttl, once their
    holders' renewals have failed: never two sessions in IDLE."""
    fleet.worker_settings["poll_interval"] = timing.SLOW_POLL
    hot = [fleet.connect(fleet.owner) for _ in range(2)] + [fleet.connect()]
    warm = [fleet.connect(fleet.member("quiet"))]
    fleet.app.projections.catch_up()
    first = fleet.start_workers(2)
    watchers = Watchers(fleet.dovecot).start()
    try:
        fleet.user_active()
        fleet.settle(watchers, hot)
        recorded = activity_keys(fleet)
        assert recorded == 2, "the owner's key and the tenant's"

        fleet.redis.kill()
        fleet.redis.start()  # same port, empty
        back_wall = time.time()
        assert activity_keys(fleet) == 0
        took = wait_for(
            "the workers to write the activity back",
            lambda: activity_keys(fleet) == recorded,
            timing.WAIT_LONG,
        )
        log.info("Redis back empty -> activity written back after %.2fs", took)
        assert fleet.events("tiers.activity_restored", back_wall)

        for worker in first:
            stop_gracefully(worker, timing.SIGTERM_WAIT)
            worker.kill()  # reaped
        spawned = time.monotonic()
        second = [fleet.start_worker(), fleet.start_worker()]
        wait_for(
            "the active users' mailboxes in IDLE again",
            lambda: fleet.watched(watchers, hot),
            timeout=timing.WORKERS_READY + FLEET_TICK + LOGIN + timing.WAIT_FAILOVER_EXTRA,
            interval=timing.FAST_POLL,
        )
        log.info("fleet restarted -> hot again after %.2fs", time.monotonic() - spawned)
        fleet.wait_ready(second)
        time.sleep(timing.QUIET_CHECK)
        assert all(watchers.now()[a.user] == 0 for a in warm), "the quiet one stays warm"
        watchers.assert_never_twice()
    finally:
        watchers.stop()
