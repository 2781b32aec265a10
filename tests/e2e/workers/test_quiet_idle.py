"""A quiet IDLE is not a dead one. Against a Dovecot that sends no "still here"
keepalive (``imap_idle_notify_interval`` far beyond the test), a watch with short probe
settings sits through a silence many probe periods long: it probes (DONE + IDLE) and
every probe is answered, so it keeps its ONE session — no new login on the server's
side, the same IDLE process throughout — and new mail still arrives by push after it."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from imapclient import IMAPClient

from tests.e2e import timing
from tests.e2e.timing import PROBE_AFTER, PROBE_TIMEOUT, QUIET_PERIODS, SLOW_POLL
from tests.e2e.workers.harness import Fleet, Watchers, idle_processes
from tests.e2e.workers.servers import RedisServer, wait_for
from tests.support.dovecot import DovecotServer, dovecot_available

log = logging.getLogger(__name__)
QUIET = "imap_idle_notify_interval = 1 hours\n"  # no keepalive within the test


@pytest.fixture
def quiet_fleet(tmp_path: Path, redis_server: RedisServer, pg_url: str) -> Iterator[Fleet]:
    if not dovecot_available():
        pytest.fail("dovecot is not installed (apt-get install dovecot-imapd)", pytrace=False)
    with DovecotServer(extra_config=QUIET) as server:
        world = Fleet(tmp_path, server, redis_server, pg_url, dict(timing.WORKER_SETTINGS))
        try:
            yield world
        finally:
            world.close()
            log.info("worker and dovecot logs:\n%s", world.logs())


def logins(server: DovecotServer, user: str) -> int:
    return len(re.findall(rf"Login: user=<{re.escape(user)}>", server.log_text()))


def test_a_quiet_idle_keeps_its_one_session_and_its_push(quiet_fleet: Fleet) -> None:
    fleet = quiet_fleet
    server = fleet.dovecot
    account = fleet.connect(fleet.owner)
    fleet.app.projections.catch_up()
    # The secondary poll under IDLE logs in on its own: kept beyond the test.
    [worker] = fleet.start_workers(
        1,
        watch_probe_after=str(PROBE_AFTER),
        watch_probe_timeout=str(PROBE_TIMEOUT),
        poll_interval=SLOW_POLL,
    )
    watchers = Watchers(server).start()
    try:
        fleet.user_active()
        wait_for("the mailbox in IDLE", lambda: fleet.watched(watchers), timing.WAIT)
        [session] = idle_processes(server)[account.user]
        before = logins(server, account.user)
        assert before >= 1  # the watch's own login is in the log: the count can see one

        # The server really is silent: a bare IDLE of another mailbox hears nothing for
        # longer than a probe period.
        other = server.add_user("listener", "pw-listener")
        bare = IMAPClient(server.host, server.port, ssl=False, timeout=30)
        bare.login(other.name, other.password)
        bare.select_folder("INBOX")
        bare.idle()
        heard = bare.idle_check(timeout=PROBE_AFTER * 1.5)
        bare.idle_done()
        bare.logout()
        assert heard == []

        time.sleep(PROBE_AFTER * QUIET_PERIODS)
        probes = worker.metric("tidings_watch_probes_total", 'outcome="answered"')
        log.info("quiet for %.0fs: %d probes answered", PROBE_AFTER * QUIET_PERIODS, probes)
        assert probes >= QUIET_PERIODS - 2  # it did probe, over and over
        assert worker.metric("tidings_watch_probes_total", 'outcome="unanswered"') == 0
        assert logins(server, account.user) == before  # no reconnect
        assert idle_processes(server)[account.user] == {session}
        watchers.assert_never_twice()
        assert "reason=silent" not in worker.log()

        fleet.deliver(account, 1)  # a maildir file: no login
        took = wait_for("the new mail, by push", fleet.all_ingested, timing.WAIT_QUICK)
        log.info("push after the quiet period: %.2fs", took)
        assert fleet.ingested_events() == 1
        # Push, not a poll (none runs within the test), and on the same session.
        assert idle_processes(server)[account.user] == {session}
        assert logins(server, account.user) == before
    finally:
        watchers.stop()
