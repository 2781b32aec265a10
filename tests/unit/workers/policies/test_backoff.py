"""RestartBackoff: 5 s doubling to 5 min, reset only after 5 healthy minutes, stale restarts."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.policies.backoff import RestartBackoff


def no_jitter() -> RestartBackoff:
    return RestartBackoff(jitter=0.0)


def fail_once(
    backoff: RestartBackoff,
    account: str,
    now: float,
    lived: float | None = None,
    retry_after: float | None = None,
) -> float:
    generation = backoff.begin(account)
    if lived is not None:
        backoff.connected(account, generation, now - lived)
    restart = backoff.failed(account, generation, now, retry_after=retry_after)
    assert restart is not None and restart.at == pytest.approx(now + restart.delay)
    return restart.delay


def test_delays_double_from_five_seconds_to_five_minutes() -> None:
    backoff = no_jitter()
    delays = [fail_once(backoff, "a", now=float(i * 1000)) for i in range(9)]
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300, 300]


def test_a_connection_that_dies_after_ten_seconds_does_not_reset_the_backoff() -> None:
    backoff = no_jitter()
    assert [fail_once(backoff, "a", now=t, lived=10.0) for t in (100.0, 200.0, 300.0)] == [
        5,
        10,
        20,
    ]
    assert backoff.failures("a") == 3


def test_a_connection_that_lived_five_minutes_resets_the_backoff() -> None:
    backoff = no_jitter()
    for t in (100.0, 200.0, 300.0):
        fail_once(backoff, "a", now=t)
    assert fail_once(backoff, "a", now=1000.0, lived=299.9) == 40
    assert fail_once(backoff, "a", now=2000.0, lived=300.0) == 5
    assert backoff.failures("a") == 1


def test_accounts_back_off_independently() -> None:
    backoff = no_jitter()
    fail_once(backoff, "a", 1.0)
    fail_once(backoff, "a", 2.0)
    assert fail_once(backoff, "b", 3.0) == 5


def test_jitter_spreads_but_stays_within_bounds() -> None:
    low = RestartBackoff(jitter=0.2, rng=lambda: 0.0)
    high = RestartBackoff(jitter=0.2, rng=lambda: 0.999999)
    assert fail_once(low, "a", 0.0) == pytest.approx(5.0)
    assert fail_once(high, "a", 0.0) == pytest.approx(6.0, abs=1e-3)  # 5 · 1.2
    for _ in range(10):
        fail_once(low, "a", 0.0)
        fail_once(high, "a", 0.0)
    assert fail_once(low, "a", 0.0) == pytest.approx(240.0)  # 300 · 0.8
    assert fail_once(high, "a", 0.0) == pytest.approx(300.0)


def test_a_server_suggested_delay_is_a_floor() -> None:
    backoff = no_jitter()
    assert fail_once(backoff, "a", 0.0, retry_after=120.0) == 120
    assert fail_once(backoff, "a", 0.0, retry_after=1.0) == 10  # the backoff is larger
    assert fail_once(backoff, "a", 0.0, retry_after=1e9) == 3600  # sane upper bound


def test_a_restart_of_an_older_generation_is_stale() -> None:
    backoff = no_jitter()
    generation = backoff.begin("a")
    restart = backoff.failed("a", generation, 0.0)
    assert restart is not None and backoff.is_current(restart)
    backoff.begin("a")  # started by a signal before the timer fired
    assert not backoff.is_current(restart)


def test_cancel_makes_scheduled_restarts_stale_but_keeps_the_failures() -> None:
    backoff = no_jitter()
    generation = backoff.begin("a")
    restart = backoff.failed("a", generation, 0.0)
    assert restart is not None
    backoff.cancel("a")
    assert not backoff.is_current(restart)
    assert fail_once(backoff, "a", 10.0) == 10


def test_reports_from_an_old_attempt_are_ignored() -> None:
    backoff = no_jitter()
    old = backoff.begin("a")
    new = backoff.begin("a")
    assert backoff.failed("a", old, 0.0) is None
    backoff.connected("a", old, 0.0)  # must not start the new attempt's clock
    restart = backoff.failed("a", new, 400.0)
    assert restart is not None and restart.delay == 5
    assert backoff.failures("a") == 1
    assert backoff.failed("unknown", 1, 0.0) is None


def test_forget_drops_the_account() -> None:
    backoff = no_jitter()
    generation = backoff.begin("a")
    restart = backoff.failed("a", generation, 0.0)
    assert restart is not None
    backoff.forget("a")
    assert not backoff.is_current(restart)
    assert backoff.failures("a") == 0


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        RestartBackoff(base=10.0, cap=5.0)
    with pytest.raises(ValueError):
        RestartBackoff(jitter=1.0)


# Each step: how long the attempt lived connected (None: failed before logging in), then
# how long after the failure the next attempt begins.
steps = st.lists(
    st.tuples(st.none() | st.floats(0.0, 1000.0), st.floats(0.0, 1000.0)), min_size=1, max_size=40
)


@settings(max_examples=100, deadline=None)
@given(steps=steps, seed=st.integers(0, 2**32))
def test_delays_stay_in_bounds_and_never_reset_early(
    steps: list[tuple[float | None, float]], seed: int
) -> None:
    backoff = RestartBackoff(rng=random.Random(seed).random)
    now = 0.0
    expected_failures = 0
    for lived, pause in steps:
        generation = backoff.begin("a")
        connected_at = None
        if lived is not None:
            connected_at = now
            backoff.connected("a", generation, now)
            now += lived
        restart = backoff.failed("a", generation, now)
        assert restart is not None
        healthy = connected_at is not None and now - connected_at >= 300.0
        expected_failures = 1 if healthy else expected_failures + 1
        assert backoff.failures("a") == expected_failures
        assert 5.0 <= restart.delay <= 300.0
        assert restart.delay >= 0.8 * backoff.delay(expected_failures)
        assert backoff.is_current(restart)
        now = restart.at + pause
