"""Per-key request budgets shared by every serving process: the same token bucket as
``infrastructure.http.rate_limit.RateLimiter``, kept in Redis (GCRA: one key per API
key holding the "theoretical arrival time", updated by one script on Redis's own clock,
so processes on hosts whose clocks differ agree).

A key's budget is ``burst`` requests at once and ``rate`` a second after that, whatever
process or host the requests reach. When Redis does not answer, each process falls back
to its own bucket (``fallback``): the API keeps serving, with a limit per process.
"""

from __future__ import annotations

import logging
import math

import redis

from infrastructure.http.rate_limit import RateLimiter
from infrastructure.redis.client import redis_client

log = logging.getLogger("tidings.http")
DEFAULT_PREFIX = "tidings:rate:"

# KEYS[1]: the key's bucket; ARGV[1]: ms between tokens; ARGV[2]: burst.
# Answers 0 (go ahead) or the ms until a token is there.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local next_tat = tat + interval
local wait = next_tat - interval * tonumber(ARGV[2]) - now
if wait > 0 then return wait end
redis.call('SET', KEYS[1], next_tat, 'PX', math.ceil(next_tat - now) + 1000)
return 0
"""


class RedisRateLimiter:
    def __init__(
        self, client: redis.Redis, rate: float, burst: int, *, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self.fallback = RateLimiter(rate, burst)  # checks rate and burst
        self._client = client
        self._take = client.register_script(_TAKE)
        self._interval_ms = 1000.0 / rate
        self._burst = burst
        self._prefix = prefix

    @classmethod
    def from_url(
        cls, url: str, rate: float, burst: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RedisRateLimiter:
        return cls(redis_client(url, timeout=0.5, retries=0), rate, burst, prefix=prefix)

    def take(self, key: str, now: float) -> float:
        """0 when the request may go ahead; else the seconds to wait (a whole number)."""
        try:
            wait_ms = float(
                self._take(keys=[self._prefix + key], args=[self._interval_ms, self._burst])
            )
        except redis.RedisError as error:
            log.warning("http.rate_limit_local error_class=%s", type(error).__name__)
            return self.fallback.take(key, now)
        return 0.0 if wait_ms <= 0 else float(max(1, math.ceil(wait_ms / 1000)))

    def close(self) -> None:
        self._client.close()
