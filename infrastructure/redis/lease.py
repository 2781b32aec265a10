"""Redis adapter of the ``LeaseBackend`` port (``application.leases``).

    acquire  EVALSHA set-if-free-and-not-quiet   (SET key token NX PX ttl_ms; token:
                                                  "<holder>:<16 random bytes, hex>", per
                                                  acquisition; ``holders`` reads the name;
                                                  one epoch check for all the keys)
    renew    EVALSHA compare-and-pexpire         (1 = extended, 0 = not ours / gone)
    release  EVALSHA compare-and-delete          (1 = deleted,  0 = not ours / gone)
    held_by  EVALSHA pttl-and-value-of-each      (ms left, -2 = free, and the holder;
                                                  ``held`` is its first half)

Acquire, renew, release and held take many keys per call: one EVALSHA for up to 500
keys (the reply is one integer per key), so renewing the leases of thousands of watches
every ttl/3, or reading the 8,000 leases of the others at a fleet tick, costs a few
calls, not thousands of pipelined commands to build and parse (a pipeline of PTTLs cost 42 ms of
CPU for 8,000 keys, the script 16 ms).

A Redis that comes back without its data (restarted without persistence, failed over to
a replica behind) has forgotten every lease while their holders still act on them until
a renewal fails (up to ttl/3 later). So no lease is granted for one ttl after such a
loss, as Redlock's "delayed restart" asks: a marker key holds the store's epoch, each
client remembers the epoch it saw, and the first acquire of a client that saw one and
finds the marker gone makes everyone wait: a whole ttl when Redis came back without an
outage this client saw (a failover), else what is left of a ttl since that outage began
(nothing after an outage longer than a ttl: every holder has stood down by then). A
client that saw none (a worker that started while Redis was away) cannot tell a loss
from a first start; the holders' failing renewals still end their watches within ttl/3.

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
import math
import secrets
import threading
import time
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

# KEYS: the epoch marker, the quiet marker, then the leases; ARGV: the ttl in ms, the
# epoch this client saw ('' for none), a new epoch, the quiet in ms should the epoch be
# gone, then one token per lease. Replies {epoch, then 1 = taken | 0 = not, per lease}.
ACQUIRE = """
local epoch = redis.call('GET', KEYS[1])
if not epoch then
    epoch = ARGV[3]
    redis.call('SET', KEYS[1], epoch)
    if ARGV[2] ~= '' and tonumber(ARGV[4]) > 0 then
        redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
    end
end
local out = {epoch}
local quiet = redis.call('EXISTS', KEYS[2]) == 1
for i = 3, #KEYS do
    if not quiet and redis.call('SET', KEYS[i], ARGV[i + 2], 'NX', 'PX', ARGV[1]) then
        out[i - 1] = 1
    else
        out[i - 1] = 0
    end
end
return out
"""

# KEYS: the leases. Replies {each one's PTTL (-2: free), each one's holder as an index
# into the names that follow (0: free), then the holders' names}: the integers joined
# by commas, so that redis-py parses three to a few strings instead of a reply per key
# and value (16,000 for 8,000 keys: 31 ms of CPU).
HELD_BY = """
local left, which, names, index = {}, {}, {}, {}
for i, key in ipairs(KEYS) do
    local value = redis.call('GET', key)
    if value then
        left[i] = redis.call('PTTL', key)
        local name = string.match(value, '^(.*):') or ''
        if not index[name] then
            names[#names + 1] = name
            index[name] = #names
        end
        which[i] = index[name]
    else
        left[i] = -2
        which[i] = 0
    end
end
return {table.concat(left, ','), table.concat(which, ','), unpack(names)}
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
        self._epoch = ""  # the store's epoch this client saw ("" before its first acquire)
        self._failing_since: float | None = None  # monotonic: the current outage's start
        self._outage = (0.0, -math.inf)  # the last outage this client saw: (start, end)

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
        return self.acquire_many([key])[key]

    def renew(self, key: str, token: str) -> bool:
        return self.renew_many({key: token})[key]

    def acquire_many(self, keys: Iterable[str]) -> dict[str, str | None]:
        wanted = list(dict.fromkeys(keys))
        answers: dict[str, str | None] = {}
        for start in range(0, len(wanted), BATCH):
            chunk = wanted[start : start + BATCH]
            tokens = [f"{self._holder}:{secrets.token_hex(16)}" for _ in chunk]
            quiet_ms = self._quiet_ms(time.monotonic())
            args = [str(self._ttl_ms), self._epoch, secrets.token_hex(8), str(quiet_ms), *tokens]
            keys = ["!epoch", "!quiet", *chunk]
            replies = self._script(ACQUIRE, keys, args, count=len(chunk) + 1)
            self._epoch = _text(replies[0])
            answers.update(
                (key, token if taken == 1 else None)
                for key, token, taken in zip(chunk, tokens, replies[1:], strict=True)
            )
        return answers

    def release(self, key: str, token: str) -> bool:
        return self.release_many({key: token})[key]

    # --- many keys, pipelined ----------------------------------------------------------

    def renew_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        return self._script_many(RENEW, items, (self._ttl_ms,))

    def release_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        return self._script_many(RELEASE, items, ())

    def held(self, keys: Iterable[str]) -> dict[str, float]:
        return {key: left for key, (left, _) in self.held_by(keys).items()}

    def held_by(self, keys: Iterable[str]) -> dict[str, tuple[float, str]]:
        wanted = list(dict.fromkeys(keys))
        found: dict[str, tuple[float, str]] = {}
        unbounded = self._ttl_ms / 1000
        for start in range(0, len(wanted), BATCH):
            chunk = wanted[start : start + BATCH]
            replies = self._script(HELD_BY, chunk, (), count=None)
            if len(replies) < 2:
                raise LeaseBackendUnavailable("unexpected reply to a lease script")
            names = ["", *(_text(name) for name in replies[2:])]
            lefts = _text(replies[0]).split(",")
            which = _text(replies[1]).split(",")
            if len(lefts) != len(chunk) or len(which) != len(chunk):
                raise LeaseBackendUnavailable("unexpected reply to a lease script")
            for key, left_ms, name in zip(chunk, map(int, lefts), map(int, which), strict=True):
                if left_ms != -2:  # -1: no expiry (not one of ours: treat as held)
                    found[key] = (left_ms / 1000 if left_ms >= 0 else unbounded, names[name])
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
            answer = action()
        except RedisError as error:
            raise self._unavailable(error) from None
        self._answered()
        return answer

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
            tokens = [token for _, token in chunk]
            replies = self._script(script, [key for key, _ in chunk], (*tokens, *extra))
            answers.update(
                (key, bool(reply)) for (key, _), reply in zip(chunk, replies, strict=True)
            )
        return answers

    def _quiet_ms(self, now: float) -> int:
        """How long nobody may be granted a lease should this acquire find the store's data
        lost (module docstring)."""
        started, ended = self._outage
        if self._failing_since is not None:  # the outage ends with this very call
            started, ended = self._failing_since, now
        if now - ended >= self._ttl_seconds:  # no outage just before: a whole ttl
            return self._ttl_ms
        return max(0, self._ttl_ms - int((now - started) * 1000))

    def _unavailable(self, error: RedisError) -> LeaseBackendUnavailable:
        if self._failing_since is None:
            self._failing_since = time.monotonic()
        return LeaseBackendUnavailable(type(error).__name__)

    def _answered(self) -> None:
        if self._failing_since is not None:
            self._outage = (self._failing_since, time.monotonic())
            self._failing_since = None

    def _script(
        self, script: str, keys: list[str], args: Sequence[str | int], count: int | None = -1
    ) -> list[Any]:
        """The replies (``count`` of them, one per key by default; None: any number) of
        one call of a many-keys script."""
        try:
            return self._evalsha(self._sha(script), keys, args, count)
        except NoScriptError:
            # Redis restarted or flushed its scripts: load again, call again.
            return self._evalsha(self._sha(script, reload=True), keys, args, count)

    def _evalsha(
        self, sha: str, keys: list[str], args: Sequence[str | int], count: int | None
    ) -> list[Any]:
        names = [self._key(key) for key in keys]
        try:
            replies = self._client.evalsha(sha, len(names), *names, *args)
        except NoScriptError:
            raise
        except RedisError as error:
            raise self._unavailable(error) from None
        self._answered()
        expected = len(keys) if count == -1 else count
        if not isinstance(replies, list) or expected not in (None, len(replies)):
            raise LeaseBackendUnavailable("unexpected reply to a lease script")
        return replies
