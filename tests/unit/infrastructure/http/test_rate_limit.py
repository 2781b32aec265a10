from __future__ import annotations

import pytest

from infrastructure.http.rate_limit import RateLimiter


def test_a_key_spends_its_burst_then_waits_for_the_rate() -> None:
    limiter = RateLimiter(rate=2.0, burst=3)
    assert [limiter.take("k", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("k", 0.0) == 1.0  # half a second to a token, rounded up
    assert limiter.take("k", 0.5) == 0.0  # one token back after 1 / rate
    assert limiter.take("k", 0.5) == 1.0


def test_keys_have_buckets_of_their_own() -> None:
    limiter = RateLimiter(rate=1.0, burst=1)
    assert limiter.take("a", 0.0) == 0.0
    assert limiter.take("b", 0.0) == 0.0
    assert limiter.take("a", 0.0) > 0


def test_a_slow_rate_answers_whole_seconds_to_wait() -> None:
    limiter = RateLimiter(rate=0.1, burst=1)
    limiter.take("k", 0.0)
    assert limiter.take("k", 1.0) == 9.0


def test_idle_buckets_are_forgotten_only_once_full_again() -> None:
    limiter = RateLimiter(rate=1.0, burst=10, idle_forget=1.0)
    for key in "abc":
        limiter.take(key, 0.0)
    limiter.take("d", 5.0)  # 5 s idle: buckets of 10 at 1/s are not full yet
    assert len(limiter) == 4
    limiter.take("d", 20.0)
    assert len(limiter) == 1


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        RateLimiter(rate=0.0, burst=1)
    with pytest.raises(ValueError):
        RateLimiter(rate=1.0, burst=0)
