"""This worker's login rate, measured from its own logins: a flood gives the machine's
throughput, a lone login its own pace, and too few (or too old) give no estimate."""

from __future__ import annotations

import pytest

from workers.policies.login_rate import MIN_LOGINS, LoginRate


def flood(rate: LoginRate, n: int, *, at: float, per_second: float) -> float:
    """n logins asked for at once, completing at ``per_second``; returns the end."""
    for _ in range(n):
        rate.started(at)
    for k in range(1, n + 1):
        rate.finished(at + k / per_second, ok=True)
    return at + n / per_second


def test_a_flood_measures_the_throughput_not_the_length_of_one_login() -> None:
    rate = LoginRate()
    end = flood(rate, 1000, at=100.0, per_second=80.0)
    assert rate.per_second(end) == pytest.approx(80.0, rel=0.01)


def test_lone_logins_measure_one_over_their_duration_and_idle_time_does_not_count() -> None:
    rate = LoginRate()
    at = 0.0
    for _ in range(int(MIN_LOGINS) * 2):
        rate.started(at)
        rate.finished(at + 0.05, ok=True)  # 50 ms each, seconds apart
        at += 5.0
    assert rate.per_second(at) == pytest.approx(20.0, rel=0.05)


def test_no_estimate_until_enough_logins_were_seen() -> None:
    rate = LoginRate()
    assert rate.per_second(0.0) is None
    end = flood(rate, int(MIN_LOGINS) - 1, at=0.0, per_second=50.0)
    assert rate.per_second(end) is None
    end = flood(rate, 2, at=end, per_second=50.0)
    assert rate.per_second(end) == pytest.approx(50.0, rel=0.01)


def test_failed_logins_count_their_time_but_not_as_logins() -> None:
    rate = LoginRate()
    end = flood(rate, 100, at=0.0, per_second=100.0)  # 1 s
    for _ in range(100):
        rate.started(end)
    rate.finished(end + 1.0, ok=False)  # a second of logins that fail...
    for _ in range(99):
        rate.finished(end + 1.0, ok=False)
    assert rate.per_second(end + 1.0) == pytest.approx(50.0, rel=0.02)  # ...halves it


def test_the_estimate_follows_the_machine_and_lapses_after_a_long_quiet() -> None:
    rate = LoginRate(half_life=600.0)
    end = flood(rate, 1000, at=0.0, per_second=200.0)  # a fast moment
    later = flood(rate, 1000, at=end + 1800.0, per_second=50.0)  # a slow one, later
    assert 50.0 < (rate.per_second(later) or 0) < 60.0  # the recent flood weighs most
    assert rate.per_second(later + 6 * 3600) is None  # hours without a login: unknown


def test_a_login_still_under_way_counts_its_time_so_far() -> None:
    rate = LoginRate()
    end = flood(rate, 100, at=0.0, per_second=100.0)
    rate.started(end)  # one that hangs
    assert rate.per_second(end + 1.0) == pytest.approx(50.0, rel=0.02)
