"""After a watch stops: start it again, back off, forget it, or nothing."""

from __future__ import annotations

import pytest

from application.mail.state import ErrorKind
from workers.policies.watch_stops import (
    QUIET_STOPS,
    AfterStop,
    StopReason,
    after_stop,
    keeps_watching,
)


@pytest.mark.parametrize("reason", sorted(QUIET_STOPS))
def test_a_quiet_stop_restarts_only_an_unwatched_account_under_our_lease(
    reason: StopReason,
) -> None:
    assert after_stop(reason, current=True, held=True, watching=False) is AfterStop.START_AGAIN
    assert after_stop(reason, current=True, held=True, watching=True) is AfterStop.NOTHING
    assert after_stop(reason, current=True, held=False, watching=False) is AfterStop.NOTHING


@pytest.mark.parametrize("reason", [StopReason.ERROR, StopReason.CLOSED, ErrorKind.AUTH])
def test_a_stop_of_an_attempt_not_ours_is_quiet(reason: StopReason | ErrorKind) -> None:
    assert after_stop(reason, current=False, held=True, watching=False) is AfterStop.START_AGAIN
    assert after_stop(reason, current=False, held=False, watching=False) is AfterStop.NOTHING


def test_an_auth_failure_forgets_the_account() -> None:
    assert after_stop(ErrorKind.AUTH, current=True, held=True, watching=False) is AfterStop.FORGET


@pytest.mark.parametrize(
    "reason",
    [StopReason.ERROR, StopReason.CLOSED, StopReason.SILENT, ErrorKind.TRANSIENT, ErrorKind.CRASH],
)
def test_a_failure_backs_off(reason: StopReason | ErrorKind) -> None:
    assert after_stop(reason, current=True, held=True, watching=False) is AfterStop.BACK_OFF
    assert after_stop(reason, current=True, held=False, watching=False) is AfterStop.BACK_OFF


@pytest.mark.parametrize(
    "kind", [ErrorKind.STORE_UNAVAILABLE, ErrorKind.INGEST_CONFLICT, ErrorKind.INGEST_FAILED]
)
def test_a_page_that_failed_on_our_side_keeps_the_watch(kind: ErrorKind) -> None:
    # The poll catches up; the IDLE session lives on (a failed ingest stops nothing).
    assert keeps_watching(kind)


@pytest.mark.parametrize(
    "kind", [ErrorKind.AUTH, ErrorKind.TRANSIENT, ErrorKind.TIMEOUT, ErrorKind.THROTTLED]
)
def test_a_page_that_failed_on_the_servers_side_stops_the_watch(kind: ErrorKind) -> None:
    assert not keeps_watching(kind)
    assert keeps_watching(None)
