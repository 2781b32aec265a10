"""Redis adapter of the ``LeaseBackend`` port (``application.leases``).

    acquire  SET key token NX PX ttl_ms          (token: "<holder>:<16 random bytes, hex>", per
                                                  acquisition; ``holders`` reads the name)
    renew    EVALSHA compare-and-pexpire         (1 = extended, 0 = not ours / gone)
    release  EVALSHA compare-and-delete          (1 = deleted,  0 = not ours / gone)

Renew and release take many keys per call: one EVALSHA for up to 500 keys (the reply
is one 1/0 per key), so renewing the leases of thousands of watches every ttl/3 costs a
few calls, not thousands of pipelined commands to build and parse.

Scripts are loaded once (``SCRIPT LOAD``) and called by sha; after a Redis restart or
``SCRIPT FLUSH`` a call answers NOSCRIPT, and the script is loaded again and the call
repeated. Every other Redis error — refused, timed out, error reply — becomes
``LeaseBackendUnavailable`` (never ``False``, which means "not yours"). Clients built by
``redis.client.redis_client`` time out after 2 s and retry a command once on a fresh
connection (so a pooled socket that died with a restarted Redis costs nothing), so a dead
Redis holds a worker for seconds, not minutes.
"""

from __future__ import annotations

import functools
import secrets
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import redis
from redis.exceptions import NoScriptError, RedisError

from application.leases import LeaseBackendUnavailable
from infrastructure.redis.client import redis_client, replied

DEFAULT_PREFIX = "tidings:lease:"
BATCH = 500

# KEYS: the leases; ARGV: their tokens (same order), then the ttl in ms for RENEW.
RENEW = """
local ttl = ARGV[#KEYS + 1]
local out = {}
for i, key in ipairs(KEYS) do
    if redis.call('GET', key) == ARGV[i] then
        out[i] = redis.call('PEXPIRE', key, ttl)
    else
        out[i] = 0
    end
end
return out
"""

RELEASE = """
local out = {}
for i, key in ipairs(KEYS) do
    if redis.call('GET', key) == ARGV[i] then
        out[i] = redis.call('DEL', key)
    else
        out[i] = 0
    end
end
return out
"""

T = TypeVar("T")


def holder_of(token: str) -> str:
    """The holder named in a token ("" for a token of no known shape)."""
    return token.rpartition(":")[0]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisLease:
    def __init__(
        self,
        client: redis.Redis,
        ttl_seconds: float,
        prefix: str = DEFAULT_PREFIX,
        *,
        holder: str = "",
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._client = client
        self._holder = holder
        self._ttl_seconds = ttl_seconds
        self._ttl_ms = max(int(ttl_seconds * 1000), 1)
        self._prefix = prefix
        self._shas: dict[str, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        ttl_seconds: float,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = 2.0,
        *,
        holder: str = "",
    ) -> RedisLease:
        return cls(redis_client(url, timeout=timeout), ttl_seconds, prefix, holder=holder)

    @property
    def ttl_seconds(self) -> float:
        return self._ttl_seconds

    def close(self) -> None:
        self._client.close()

    # --- single keys -------------------------------------------------------------------

    def acquire(self, key: str) -> str | None:
        token = f"{self._holder}:{secrets.token_hex(16)}"
        taken = self._call(
            lambda: self._client.set(self._key(key), token, nx=True, px=self._ttl_ms)
        )
        return token if taken else None

    def renew(self, key: str, token: str) -> bool:
        return self.renew_many({key: token})[key]

    def release(self, key: str, token: str) -> bool:
        return self.release_many({key: token})[key]

    # --- many keys, pipelined ----------------------------------------------------------

    def renew_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        return self._script_many(RENEW, items, (self._ttl_ms,))

    def release_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        return self._script_many(RELEASE, items, ())

    def held(self, keys: Iterable[str]) -> dict[str, float]:
        wanted = list(dict.fromkeys(keys))
        found: dict[str, float] = {}
        for start in range(0, len(wanted), BATCH):
            chunk = wanted[start : start + BATCH]

            def run(chunk: list[str] = chunk) -> list[Any]:
                pipe = self._client.pipeline(transaction=False)
                for key in chunk:
                    pipe.pttl(self._key(key))
                return pipe.execute()

            replies = self._call(run)
            # PTTL: -2 = no such key; -1 = no expiry (not one of ours: treat as held).
            found.update(
                (key, reply / 1000 if reply >= 0 else self._ttl_ms / 1000)
                for key, reply in zip(chunk, replies, strict=True)
                if reply != -2
            )
        return found

    def holders(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        found: dict[str, str] = {}
        for start in range(0, len(wanted), BATCH):
            names = [self._key(key) for key in wanted[start : start + BATCH]]
            chunk = wanted[start : start + BATCH]
            values: list[Any] = replied(self._call(functools.partial(self._client.mget, names)))
            found.update(
                (key, holder_of(_text(value)))
                for key, value in zip(chunk, values, strict=True)
                if value is not None
            )
        return found

    # --- internals ---------------------------------------------------------------------

    def _key(self, key: str) -> str:
        return self._prefix + key

    def _call(self, action: Callable[[], T]) -> T:
        try:
            return action()
        except RedisError as error:
            raise LeaseBackendUnavailable(type(error).__name__) from None

    def _sha(self, script: str, *, reload: bool = False) -> str:
        with self._lock:
            sha = self._shas.get(script)
        if sha is None or reload:
            sha = _text(self._call(lambda: replied(self._client.script_load(script))))
            with self._lock:
                self._shas[script] = sha
        return sha

    def _script_many(
        self, script: str, items: Mapping[str, str], extra: Sequence[int]
    ) -> dict[str, bool]:
        pairs = list(items.items())
        answers: dict[str, bool] = {}
        for start in range(0, len(pairs), BATCH):
            chunk = pairs[start : start + BATCH]
            try:
                replies = self._evalsha(self._sha(script), chunk, extra)
            except NoScriptError:
                # Redis restarted or flushed its scripts: load again, call again.
                replies = self._evalsha(self._sha(script, reload=True), chunk, extra)
            answers.update(
                (key, bool(reply)) for (key, _), reply in zip(chunk, replies, strict=True)
            )
        return answers

    def _evalsha(self, sha: str, chunk: list[tuple[str, str]], extra: Sequence[int]) -> list[Any]:
        keys = [self._key(key) for key, _ in chunk]
        tokens = [token for _, token in chunk]
        try:
            replies = self._client.evalsha(sha, len(keys), *keys, *tokens, *extra)
        except NoScriptError:
            raise
        except RedisError as error:
            raise LeaseBackendUnavailable(type(error).__name__) from None
        if not isinstance(replies, list) or len(replies) != len(chunk):
            raise LeaseBackendUnavailable("unexpected reply to a lease script")
        return replies
