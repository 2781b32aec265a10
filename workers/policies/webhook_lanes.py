"""Which lane a webhook attempt goes to, and how much each lane may claim.

Two lanes, each with a pool of its own: *fast* for healthy endpoints, *slow* for the
endpoints whose last attempt here failed or was slow. An *endpoint* is a tenant's
destination, the scheme, host and port of a webhook's URL (``Endpoint``): attempts are
counted and slowness is remembered by it, not by webhook id, so a tenant's many
webhooks at one host count as one, and deleting and re-creating them under new ids
neither adds attempts nor makes a slow host fast again. It is per tenant so that a
tenant cannot make a host that other tenants also use (a chat service, an automation
platform) slow or busy for them: a wrong path there fails only its own tenant's
attempts.

Per endpoint the policy keeps the attempts in flight in this worker, whether it is
slow, and when it last had an attempt claimed (its turn); per lane and tenant, the
attempts in flight; per lane, the attempts in flight.

    (not slow) --an attempt fails, or takes longer than slow_after--> slow
    slow       --an attempt answers 2xx within slow_after-->          (not slow)
    slow       --the least recently used of more than `remembered`--> (forgotten)

Invariants:

- A slow endpoint is only ever claimed in the slow lane, so slow or failing endpoints
  can only occupy the slow pool and never delay a healthy one.
- At most ``per_host`` attempts of one endpoint are in flight in this worker (both lanes
  together); a tenant has at most ``tenant_share(lane)`` attempts in flight in a lane
  (``per_tenant``, and never more than half the lane's pool), so however many webhooks
  and hosts it has, one tenant leaves most of each pool to the others; a lane never has
  more attempts in flight than its pool.
- The slow lane takes turns: its endpoints waiting longest since their last claim go
  first (``Lane.turns``), so one slow endpoint's backlog cannot starve another's.
- Memory is bounded: at most ``remembered`` slow endpoints (the least recently used is
  forgotten first and, if still slow, learnt again by one attempt in the fast lane);
  counts and turns are kept only for endpoints in flight or remembered slow.
- ``started`` and ``finished`` come in pairs for every claimed attempt (a bug's outcome
  included); nothing here reads a clock or does I/O (``now`` is passed in).

Not thread-safe: the delivery loop calls it under its own lock (a plan's ``Quota`` is a
copy, used by one claim).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Literal, TypeVar

from application.webhooks.delivery_ports import Claimed, Endpoint, Lane, Outcome

LaneName = Literal["fast", "slow"]
FAST: LaneName = "fast"
SLOW: LaneName = "slow"
K = TypeVar("K")
LANES: tuple[LaneName, LaneName] = (FAST, SLOW)  # a plan's lanes, in the claim's order


@dataclass(frozen=True)
class LaneSettings:
    fast_pool: int = 32
    slow_pool: int = 8
    per_host: int = 2  # attempts in flight per endpoint (a tenant's scheme, host, port)
    per_tenant: int = 8  # attempts in flight per tenant in each lane (at most half of it)
    slow_after: float = 1.0  # seconds; an attempt slower than this makes its endpoint slow
    remembered: int = 4096  # slow endpoints remembered at most

    def pool(self, lane: LaneName) -> int:
        return self.fast_pool if lane == FAST else self.slow_pool

    def tenant_share(self, lane: LaneName) -> int:
        """A tenant's attempts in flight in ``lane`` at most: ``per_tenant``, and never
        more than half the lane's pool (one at least)."""
        return min(self.per_tenant, max(1, self.pool(lane) // 2))


class Quota:
    """One claim's admission (``Admission``): the caps per endpoint and per tenant over
    a copy of what is in flight here, counting each head it admits."""

    def __init__(
        self,
        settings: LaneSettings,
        in_flight: dict[Endpoint, int],
        tenants: dict[LaneName, dict[str, int]],
    ) -> None:
        self.settings = settings
        self.in_flight = in_flight
        self.tenants = tenants

    def admit(self, lane: int, endpoint: Endpoint) -> bool:
        name = LANES[lane]
        tenants = self.tenants[name]
        if self.in_flight.get(endpoint, 0) >= self.settings.per_host:
            return False
        if tenants.get(endpoint.tenant_id, 0) >= self.settings.tenant_share(name):
            return False
        self.in_flight[endpoint] = self.in_flight.get(endpoint, 0) + 1
        tenants[endpoint.tenant_id] = tenants.get(endpoint.tenant_id, 0) + 1
        return True


@dataclass(frozen=True)
class LanePlan:
    """One claim's shares, ``fast`` and ``slow`` in that order (``LANES``), and the
    quota that admits each head against the caps."""

    fast: Lane
    slow: Lane
    quota: Quota


def is_slow(outcome: Outcome, slow_after: float) -> bool:
    """Whether an attempt's outcome makes its endpoint slow: no answer, an error status
    or any failure, or an answer later than ``slow_after`` seconds."""
    failed = outcome.status is None or outcome.error is not None
    return failed or outcome.seconds > slow_after


class LanePolicy:
    def __init__(self, settings: LaneSettings) -> None:
        self.settings = settings
        self._in_flight: Counter[Endpoint] = Counter()  # attempts in flight here
        self._tenants: dict[LaneName, Counter[str]] = {FAST: Counter(), SLOW: Counter()}
        self._lanes: dict[LaneName, int] = {FAST: 0, SLOW: 0}
        self._slow: OrderedDict[Endpoint, None] = OrderedDict()  # least recently used first
        self._turns: dict[Endpoint, float] = {}  # its last claim, while in flight or slow

    def plan(self) -> LanePlan | None:
        """The shares of the next claim; None when both lanes are full."""
        s = self.settings
        free_fast = s.fast_pool - self._lanes[FAST]
        free_slow = s.slow_pool - self._lanes[SLOW]
        if free_fast <= 0 and free_slow <= 0:
            return None
        full = {e for e, n in self._in_flight.items() if n >= s.per_host}
        busy = {
            lane: {t for t, n in self._tenants[lane].items() if n >= s.tenant_share(lane)}
            for lane in LANES
        }
        slow = set(self._slow) - full
        return LanePlan(
            fast=Lane(
                max(free_fast, 0), exclude=full | set(self._slow), exclude_tenants=busy[FAST]
            ),
            slow=Lane(
                max(free_slow, 0),
                only=slow,
                exclude_tenants=busy[SLOW],
                turns={e: self._turns.get(e, 0.0) for e in slow},
            ),
            quota=Quota(
                s,
                dict(self._in_flight),
                {lane: dict(self._tenants[lane]) for lane in LANES},
            ),
        )

    def started(self, claimed: Claimed, lane: LaneName, now: float) -> None:
        endpoint = claimed.endpoint
        self._turns[endpoint] = now
        if endpoint in self._slow:
            self._slow.move_to_end(endpoint)
        self._in_flight[endpoint] += 1
        self._tenants[lane][endpoint.tenant_id] += 1
        self._lanes[lane] += 1

    def finished(self, claimed: Claimed, lane: LaneName, outcome: Outcome) -> None:
        endpoint = claimed.endpoint
        _decrement(self._in_flight, endpoint)
        _decrement(self._tenants[lane], endpoint.tenant_id)
        self._lanes[lane] = max(self._lanes[lane] - 1, 0)
        if is_slow(outcome, self.settings.slow_after):
            self._slow[endpoint] = None
            self._slow.move_to_end(endpoint)
            while len(self._slow) > self.settings.remembered:
                forgotten, _ = self._slow.popitem(last=False)
                self._forget_turn(forgotten)
        else:
            self._slow.pop(endpoint, None)
        self._forget_turn(endpoint)

    def _forget_turn(self, endpoint: Endpoint) -> None:
        if endpoint not in self._slow and endpoint not in self._in_flight:
            self._turns.pop(endpoint, None)

    def in_flight(self, lane: LaneName) -> int:
        return self._lanes[lane]

    def is_slow(self, endpoint: Endpoint) -> bool:
        return endpoint in self._slow

    def remembered(self) -> int:
        """Endpoints this policy holds anything about (slow, in flight, or with a turn)."""
        return len(set(self._slow) | set(self._in_flight) | set(self._turns))


def _decrement(counts: Counter[K], key: K) -> None:
    """One less of ``key``, dropping it at zero (so the counts hold only what runs)."""
    left = counts[key] - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
