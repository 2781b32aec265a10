"""Redis adapter of the ``WorkerRegistry`` port: worker heartbeats (docs/workers.md).

Each worker owns one hash ``tidings:worker:<id>`` = {held: <leases held>, at: <unix time>}
with a ttl of ``ttl_seconds`` (half the lease ttl: see ``bootstrap``), rewritten every
fleet tick, so a worker that died drops out of ``live_workers`` before its leases
expire. ``live_workers`` finds the hashes with SCAN (never KEYS)
and reads them in one pipelined round trip; a stray key under the prefix that is not a
heartbeat is skipped. Connection errors and timeouts become ``LeaseBackendUnavailable``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.exceptions import RedisError

from application.leases import LeaseBackendUnavailable
from infrastructure.redis.client import redis_client

DEFAULT_PREFIX = "tidings:worker:"
T = TypeVar("T")


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


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

    def heartbeat(self, held: int) -> None:
        def run() -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            key = self._prefix + self._worker_id
            pipe.hset(key, mapping={"held": held, "at": f"{time.time():.3f}"})
            pipe.pexpire(key, self._ttl_ms)
            return pipe.execute()

        self._call(run)

    def live_workers(self) -> dict[str, int]:
        def run() -> dict[str, int]:
            keys = [
                _text(key)
                for key in self._client.scan_iter(
                    match=_glob_escape(self._prefix) + "*", count=1000
                )
            ]
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.hget(key, "held")
            live: dict[str, int] = {}
            for key, held in zip(keys, pipe.execute(raise_on_error=False), strict=True):
                if held is None or isinstance(held, Exception):
                    continue  # expired between SCAN and HGET, or not a heartbeat
                try:
                    live[key[len(self._prefix) :]] = int(_text(held))
                except ValueError:
                    continue  # not a heartbeat either
            return live

        return self._call(run)

    def leave(self) -> None:
        self._call(lambda: self._client.delete(self._prefix + self._worker_id))

    def close(self) -> None:
        self._client.close()

    def _call(self, action: Callable[[], T]) -> T:
        try:
            return action()
        except RedisError as error:
            raise LeaseBackendUnavailable(type(error).__name__) from None
