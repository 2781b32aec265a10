"""When a failed watch may restart.

Per account: ``generation`` (of the current attempt or scheduled restart), ``failures``
(consecutive, since the last healthy connection) and ``connected_at``:

    begin ------------> attempting(g)      any start, scheduled or not; g is new
    attempting(g) --connected(g, now)--> connected(g, since now)
    attempting | connected (g) --failed(g, now)--> waiting(g') -> Restart(g', at)
    waiting(g') --the restart fires, is_current--> begin
    any --cancel--> idle (a new generation: every scheduled restart becomes stale)

Invariants:

- The delay after the n-th consecutive failure is ``base · 2^(n-1)`` capped at ``cap``
  (5 s doubling to 5 min), spread by ±``jitter`` but never below ``base`` nor above
  ``cap``; a server-suggested delay (throttling) is a floor above that, itself capped at
  ``max_server_delay``.
- ``failures`` goes back to zero only when a connection had lived ``healthy_after``
  (5 min) when it failed. A login that succeeds and dies ten seconds later does not reset
  it: resetting on every login is what causes login storms.
- Generations come from one counter and are never reused. A report (``connected``,
  ``failed``) for an old generation is ignored; a ``Restart`` whose generation is not the
  account's current one is stale and must not be acted on.
- ``cancel`` keeps ``failures`` (a stop/start cycle does not reset the backoff);
  ``forget`` drops the account entirely (deleted).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Restart:
    account_id: str
    generation: int
    at: float
    delay: float


@dataclass
class _State:
    generation: int
    failures: int = 0
    connected_at: float | None = None


class RestartBackoff:
    def __init__(
        self,
        *,
        base: float = 5.0,
        cap: float = 300.0,
        healthy_after: float = 300.0,
        jitter: float = 0.2,
        max_server_delay: float = 3600.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if not 0 < base <= cap:
            raise ValueError("need 0 < base <= cap")
        if not 0 <= jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        self.base = base
        self.cap = cap
        self.healthy_after = healthy_after
        self.jitter = jitter
        self.max_server_delay = max_server_delay
        self._rng = rng
        self._generations = itertools.count(1)
        self._states: dict[str, _State] = {}

    def _state(self, account_id: str) -> _State:
        state = self._states.get(account_id)
        if state is None:
            state = self._states[account_id] = _State(next(self._generations))
        return state

    def begin(self, account_id: str) -> int:
        """A watch attempt starts now (scheduled or not): its generation."""
        state = self._state(account_id)
        state.generation = next(self._generations)
        state.connected_at = None
        return state.generation

    def connected(self, account_id: str, generation: int, now: float) -> None:
        """The attempt logged in and watches: the connection's life starts now."""
        state = self._states.get(account_id)
        if state is not None and state.generation == generation:
            state.connected_at = now

    def failed(
        self, account_id: str, generation: int, now: float, *, retry_after: float | None = None
    ) -> Restart | None:
        """The attempt failed or its connection died: when to restart (None: stale report)."""
        state = self._states.get(account_id)
        if state is None or state.generation != generation:
            return None
        if state.connected_at is not None and now - state.connected_at >= self.healthy_after:
            state.failures = 0
        state.failures += 1
        delay = self._jittered(self.delay(state.failures))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_server_delay))
        state.generation = next(self._generations)
        state.connected_at = None
        return Restart(account_id, state.generation, now + delay, delay)

    def is_current(self, restart: Restart) -> bool:
        state = self._states.get(restart.account_id)
        return state is not None and state.generation == restart.generation

    def cancel(self, account_id: str) -> None:
        """The account's watch stops: any scheduled restart is stale; failures are kept."""
        state = self._states.get(account_id)
        if state is not None:
            state.generation = next(self._generations)
            state.connected_at = None

    def forget(self, account_id: str) -> None:
        self._states.pop(account_id, None)

    def failures(self, account_id: str) -> int:
        state = self._states.get(account_id)
        return state.failures if state is not None else 0

    def delay(self, failures: int) -> float:
        """The un-jittered delay after ``failures`` consecutive failures (>= 1)."""
        return min(self.cap, self.base * 2.0 ** min(max(failures, 1) - 1, 64))

    def _jittered(self, delay: float) -> float:
        # Uniform over [delay·(1-jitter), delay·(1+jitter)] clipped to [base, cap], so
        # even the first and the capped delays are spread.
        low = max(self.base, delay * (1 - self.jitter))
        high = min(self.cap, delay * (1 + self.jitter))
        return low + (high - low) * self._rng()
