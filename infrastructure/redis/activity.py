"""Redis adapter of the ``UserActivity`` port (docs/workers.md, tiers).

One string key per active user, ``tidings:active:u:<tenant>:<user>``, and one per
tenant, ``tidings:active:t:<tenant>``, each holding the unix time of the last
``user-active`` and living for the user-active window (``PX``): Redis forgets an
inactive user by itself, and a restarted fleet finds the active ones again. Ids are
percent-encoded, so no id can spell another's key. A fleet tick asks about all its
accounts' users and tenants with MGETs of ``CHUNK`` keys each, pipelined: one round trip
whatever the number of accounts. A value that is not a number is ignored (data, never
control). Recording is best effort and does not wait for Redis: the SETs go out from a
write-behind thread (``write_behind.py``), a user's repeated records coalesced, and
its failures are logged; this process's reads and restores send them first. Reading
failures become
``ActivityUnavailable``. ``restore`` writes a time back only where the key is missing or
older (one script per chunk of keys), for what is left of its window.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from typing import TypeVar
from urllib.parse import quote

import redis
from redis.exceptions import RedisError

from application.mail.activity import ActiveTimes, ActivityUnavailable, UserKey
from infrastructure.redis.client import redis_client
from infrastructure.redis.write_behind import Command, WriteBehind

DEFAULT_PREFIX = "tidings:active:"
CHUNK = 1000
# KEYS: the keys; ARGV: per key its time and its milliseconds left. A newer (or equal)
# time in Redis wins; a value that is not a number is replaced.
RESTORE = """
for i, key in ipairs(KEYS) do
    local at = ARGV[2 * i - 1]
    local held = tonumber(redis.call('GET', key))
    if not held or held < tonumber(at) then
        redis.call('SET', key, at, 'PX', ARGV[2 * i])
    end
end
return 0
"""
log = logging.getLogger("tidings.activity")
K = TypeVar("K")


def _part(text: str) -> str:
    return quote(text, safe="")


class RedisActivity:
    def __init__(self, client: redis.Redis, window: float, prefix: str = DEFAULT_PREFIX) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self._client = client
        self._window = window
        self._prefix = prefix
        self._behind = WriteBehind(client, "activity", _record_failed)

    @classmethod
    def from_url(
        cls, url: str, window: float, prefix: str = DEFAULT_PREFIX, timeout: float = 2.0
    ) -> RedisActivity:
        return cls(redis_client(url, timeout=timeout), window, prefix)

    def close(self) -> None:
        self._behind.close()
        self._client.close()

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until what this process recorded has reached Redis (or failed)."""
        return self._behind.flush(timeout)

    @property
    def window(self) -> float:
        return self._window

    def user_key(self, tenant_id: str, user_id: str) -> str:
        return f"{self._prefix}u:{_part(tenant_id)}:{_part(user_id)}"

    def tenant_key(self, tenant_id: str) -> str:
        return f"{self._prefix}t:{_part(tenant_id)}"

    def record(self, tenant_id: str, user_id: str, at: float) -> None:
        ttl_ms = max(int(self._window * 1000), 1)
        value = repr(float(at))
        for key in (self.user_key(tenant_id, user_id), self.tenant_key(tenant_id)):
            self._behind.put(Command("set", (key, value), {"px": ttl_ms}), key)

    def restore(
        self, users: Mapping[UserKey, float], tenants: Mapping[str, float], now: float
    ) -> None:
        entries = [(self.user_key(t, u), at) for (t, u), at in users.items()]
        entries += [(self.tenant_key(t), at) for t, at in tenants.items()]
        left = [(key, at, int((at + self._window - now) * 1000)) for key, at in entries]
        left = [entry for entry in left if entry[2] > 0]
        self._behind.flush()  # a newer time recorded here is in Redis before the script
        try:
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(left), CHUNK):
                chunk = left[start : start + CHUNK]
                argv = [part for _, at, ms in chunk for part in (repr(float(at)), str(ms))]
                pipe.eval(RESTORE, len(chunk), *[key for key, _, _ in chunk], *argv)
            pipe.execute()
        except RedisError as error:
            log.warning("activity.restore_failed error=%s", type(error).__name__)

    def last_active(
        self, users: Collection[UserKey], tenants: Collection[str], now: float
    ) -> ActiveTimes:
        user_list, tenant_list = list(dict.fromkeys(users)), list(dict.fromkeys(tenants))
        keys = [self.user_key(t, u) for t, u in user_list] + [
            self.tenant_key(t) for t in tenant_list
        ]
        if not keys:
            return ActiveTimes()
        self._behind.flush()  # what this process recorded is read back
        try:
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(keys), CHUNK):
                pipe.mget(keys[start : start + CHUNK])
            values = [v for chunk in pipe.execute() for v in chunk]
        except RedisError as error:
            raise ActivityUnavailable(f"activity unreadable: {type(error).__name__}") from error
        times = [self._time(v, now) for v in values]
        return ActiveTimes(
            users=_found(user_list, times[: len(user_list)]),
            tenants=_found(tenant_list, times[len(user_list) :]),
        )

    def _time(self, value: object, now: float) -> float | None:
        if not isinstance(value, str | bytes) or len(value) > 32:
            return None
        try:
            at = float(value)
        except ValueError:
            return None
        if not math.isfinite(at) or now - at >= self._window:
            return None
        return at


def _found(keys: Sequence[K], times: Sequence[float | None]) -> dict[K, float]:
    return {k: t for k, t in zip(keys, times, strict=True) if t is not None}


def _record_failed(error: RedisError, batch: list[Command]) -> None:
    log.warning("activity.record_failed keys=%d error=%s", len(batch), type(error).__name__)
