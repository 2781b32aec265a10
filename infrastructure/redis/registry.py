"""Redis adapter of the ``WorkerRegistry`` port: worker heartbeats (docs/workers.md).

Each worker owns one hash ``tidings:worker:<id>`` = {held: <leases held>, at: <unix time>}
with a ttl of ``ttl_seconds`` (half the lease ttl: see ``bootstrap``), rewritten every
fleet tick, so a worker that died drops out of ``live_workers`` before its leases
expire. Each heartbeat also adds the worker's id to one set, ``tidings:worker-index``;
``live_workers`` reads the hashes of the ids in that set in one script call (one round
trip), and drops from the set the ids whose hash expired. It used to SCAN the whole
keyspace for the hashes: with 10,000 leases and as many activity keys that was a dozen
round trips and 20,000 keys walked per worker and fleet tick. A stray key under the
prefix is not a heartbeat unless its id is in the set, and a value that is not a count
is skipped. Connection errors and timeouts become ``LeaseBackendUnavailable``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.exceptions import RedisError

from application.leases import LeaseBackendUnavailable, WorkerSeen
from infrastructure.redis.client import redis_client

DEFAULT_PREFIX = "tidings:worker:"
T = TypeVar("T")


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


# The ids in the index (KEYS[1]) whose heartbeat hash (ARGV[1] .. id) is still there,
# each followed by its lease count; the ids whose key is gone are dropped from the index
# (a key of another type under the prefix is skipped). The script and a heartbeat
# (HSET, PEXPIRE, SADD in one transaction) never interleave: an id is dropped only when
# its worker's heartbeat has lapsed, and its next heartbeat adds it again.
_LIVE_WORKERS = """
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local held = redis.pcall('HGET', ARGV[1] .. id, 'held')
  if type(held) == 'string' then
    out[#out + 1] = id
    out[#out + 1] = held
  elseif redis.call('EXISTS', ARGV[1] .. id) == 0 then
    redis.call('SREM', KEYS[1], id)
  end
end
return out
"""


class RedisFleet:
    def __init__(
        self, client: redis.Redis, worker_id: str, ttl_seconds: float, prefix: str = DEFAULT_PREFIX
    ) -> None:
        if not worker_id:
            raise ValueError("worker_id must not be empty")
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._client = client
        self._worker_id = worker_id
        self._ttl_ms = max(int(ttl_seconds * 1000), 1)
        self._interval = ttl_seconds / 3
        self._prefix = prefix
        self._index = prefix.rstrip(":") + "-index"
        self._live = client.register_script(_LIVE_WORKERS)

    @classmethod
    def from_url(
        cls,
        url: str,
        worker_id: str,
        ttl_seconds: float,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = 2.0,
    ) -> RedisFleet:
        return cls(redis_client(url, timeout=timeout), worker_id, ttl_seconds, prefix)

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def interval(self) -> float:
        return self._interval

    def heartbeat(self, held: int, login_rate: float | None = None) -> None:
        # An empty rate (not measured yet) replaces an older one: never a stale figure.
        logins = "" if login_rate is None else f"{login_rate:.3f}"

        def run() -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            key = self._prefix + self._worker_id
            pipe.hset(key, mapping={"held": held, "at": f"{time.time():.3f}", "logins": logins})
            pipe.pexpire(key, self._ttl_ms)
            pipe.sadd(self._index, self._worker_id)
            return pipe.execute()

        self._call(run)

    def live_workers(self) -> dict[str, int]:
        def run() -> dict[str, int]:
            found = self._live(keys=[self._index], args=[self._prefix])
            live: dict[str, int] = {}
            for worker, held in zip(found[::2], found[1::2], strict=True):
                try:
                    live[_text(worker)] = int(_text(held))
                except ValueError:
                    continue  # not a heartbeat
            return live

        return self._call(run)

    def leave(self) -> None:
        def run() -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self._prefix + self._worker_id)
            pipe.srem(self._index, self._worker_id)
            return pipe.execute()

        self._call(run)

    def close(self) -> None:
        self._client.close()

    def _call(self, action: Callable[[], T]) -> T:
        try:
            return action()
        except RedisError as error:
            raise LeaseBackendUnavailable(type(error).__name__) from None


class RedisWorkers:
    """The ``FleetView`` over the heartbeats ``RedisFleet`` writes: every live worker's
    leases held, last heartbeat and login rate, in one script call (one round trip).
    Values that are not numbers are skipped (a stray key is not a heartbeat)."""

    def __init__(self, client: redis.Redis, prefix: str = DEFAULT_PREFIX) -> None:
        self._client = client
        self._prefix = prefix
        self._index = prefix.rstrip(":") + "-index"
        self._read = client.register_script(_WORKERS)

    @classmethod
    def from_url(cls, url: str, prefix: str = DEFAULT_PREFIX, timeout: float = 2.0) -> RedisWorkers:
        return cls(redis_client(url, timeout=timeout), prefix)

    def workers(self) -> list[WorkerSeen]:
        try:
            found = self._read(keys=[self._index], args=[self._prefix])
        except RedisError as error:
            raise LeaseBackendUnavailable(type(error).__name__) from None
        seen = []
        for worker, held, at, logins in zip(*[iter(found)] * 4, strict=True):
            try:
                rate = float(_text(logins)) if _text(logins) else None
                seen.append(WorkerSeen(_text(worker), int(_text(held)), float(_text(at)), rate))
            except ValueError:
                continue  # not a heartbeat
        return sorted(seen, key=lambda w: w.worker_id)

    def close(self) -> None:
        self._client.close()


# Each indexed worker whose heartbeat hash is there: id, held, at, logins ("" if absent).
_WORKERS = """
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local got = redis.pcall('HMGET', ARGV[1] .. id, 'held', 'at', 'logins')
  if type(got) == 'table' and got[1] and got[2] then
    out[#out + 1] = id
    out[#out + 1] = got[1]
    out[#out + 1] = got[2]
    out[#out + 1] = got[3] or ''
  end
end
return out
"""
