"""Best-effort Redis writes sent off the caller's thread.

``user-active`` is called on every login and websocket ping: the activity it records
and the signal it publishes are best effort by contract (a lost one costs a tier
change a fleet tick later), so the caller need not wait two round trips for them.
Callers hand a command in and return at once; one daemon thread sends everything
that gathered meanwhile in one pipeline. A command with a key replaces the pending
one of the same key (the activity's "last active" keys: a burst of pings from one user
is one SET); keyless commands (signals) keep their order. The pending commands are
bounded; past the bound new ones are dropped and counted in the log. ``flush`` waits
until everything handed in before it has been sent (or has failed), so an adapter can
read its own writes and a process can close without losing them.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.exceptions import RedisError

log = logging.getLogger("tidings.redis")

LIMIT = 10_000  # pending commands


@dataclass(frozen=True)
class Command:
    method: str  # a pipeline method: "set", "publish"
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


class WriteBehind:
    def __init__(
        self,
        client: redis.Redis,
        name: str,
        on_error: Callable[[RedisError, list[Command]], None],
        limit: int = LIMIT,
    ) -> None:
        self._client = client
        self._name = name
        self._on_error = on_error
        self._limit = limit
        self._changed = threading.Condition()
        self._pending: dict[Hashable, Command] = {}
        self._order = itertools.count()
        self._handed = 0  # commands handed in (a replaced one counts once more)
        self._done = 0  # of those, sent or failed
        self._dropped = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    def put(self, command: Command, key: Hashable | None = None) -> None:
        with self._changed:
            if self._closed:
                return
            slot = ("k", key) if key is not None else ("o", next(self._order))
            if slot not in self._pending and len(self._pending) >= self._limit:
                self._dropped += 1
                return
            if slot in self._pending:
                self._done += 1  # the replaced command will never be sent on its own
            self._pending[slot] = command
            self._handed += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"tidings-{self._name}-writer", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until every command handed in before the call is sent or failed."""
        deadline = time.monotonic() + timeout
        with self._changed:
            wanted = self._handed
            while self._done < wanted:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None:
                    return False
                self._changed.wait(left)
        return True

    def close(self, timeout: float = 2.0) -> None:
        self.flush(timeout)
        with self._changed:
            self._closed = True
            thread = self._thread
            self._changed.notify_all()
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._pending and not self._closed:
                    self._changed.wait()
                if not self._pending:
                    return
                batch, self._pending = list(self._pending.values()), {}
                dropped, self._dropped = self._dropped, 0
            if dropped:
                log.warning("redis.write_behind_dropped name=%s count=%d", self._name, dropped)
            self._send(batch)
            with self._changed:
                self._done += len(batch)
                self._changed.notify_all()

    def _send(self, batch: list[Command]) -> None:
        try:
            pipe = self._client.pipeline(transaction=False)
            for command in batch:
                getattr(pipe, command.method)(*command.args, **command.kwargs)
            pipe.execute()
        except RedisError as error:
            self._on_error(error, batch)
        except Exception as error:  # a bug must not end the thread: drop the batch
            log.exception("redis.write_behind_failed name=%s error=%s", self._name, error)
