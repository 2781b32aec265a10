"""The shared per-key budget on the real Redis: two limiters (as two serving processes)
spend one budget; keys stay apart; the bucket refills at the rate; a Redis that does not
answer leaves each process its own bucket."""

from __future__ import annotations

import time

from infrastructure.redis.client import redis_client, replied
from infrastructure.redis.rate_limit import RedisRateLimiter
from tests.integration.redis.conftest import REDIS_URL


def limiter(prefix: str, rate: float, burst: int, url: str = REDIS_URL) -> RedisRateLimiter:
    return RedisRateLimiter(redis_client(url, timeout=0.5, retries=0), rate, burst, prefix=prefix)


def test_two_processes_spend_one_budget_per_key(prefix: str) -> None:
    one, two = limiter(prefix, 0.5, 3), limiter(prefix, 0.5, 3)
    answers = [one.take("k", 0), two.take("k", 0), one.take("k", 0), two.take("k", 0)]
    assert answers[:3] == [0.0, 0.0, 0.0]
    assert answers[3] == 2.0  # the next token in 1 / rate seconds
    assert one.take("other", 0) == 0.0  # another key has its own budget
    assert len(one.fallback) == 0  # Redis answered: no local bucket was used
    one.close()
    two.close()


def test_the_bucket_refills_at_the_rate(prefix: str) -> None:
    fast = limiter(prefix, 20.0, 1)
    assert fast.take("k", 0) == 0.0
    assert fast.take("k", 0) == 1.0  # 50 ms to the next token, answered as 1 s
    time.sleep(0.12)
    assert fast.take("k", 0) == 0.0
    fast.close()


def test_a_key_left_alone_leaves_nothing_behind(prefix: str) -> None:
    fast = limiter(prefix, 100.0, 2)
    fast.take("k", 0)
    ttl = replied(redis_client(REDIS_URL).pttl(prefix + "k"))
    assert 0 < ttl <= 1000 + 10  # about the time to refill, plus a second
    fast.close()


def test_without_redis_each_process_keeps_its_own_bucket(prefix: str, closed_port: int) -> None:
    away = limiter(prefix, 0.5, 2, url=f"redis://127.0.0.1:{closed_port}/0")
    assert [away.take("k", 0.0), away.take("k", 0.0)] == [0.0, 0.0]
    assert away.take("k", 0.0) == 2.0
    assert len(away.fallback) == 1
    away.close()
