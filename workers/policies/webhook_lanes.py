"""Which lane a webhook attempt goes to, and how much each lane may claim.

Two lanes, each with a pool of its own: *fast* for healthy endpoints, *slow* for the
endpoints whose last attempt here failed or was slow. Per endpoint the policy remembers
the attempts in flight in this worker, whether it is slow, and when it last had an
attempt claimed (its turn); per lane, the attempts in flight.

    (not slow) --an attempt fails, or takes longer than slow_after--> slow
    slow       --an attempt answers 2xx within slow_after-->          (not slow)

Invariants:

- A slow endpoint is only ever claimed in the slow lane, so slow or failing endpoints
  can only occupy the slow pool and never delay a healthy one.
- At most ``per_endpoint`` attempts of one endpoint are in flight in this worker, and a
  lane never has more attempts in flight than its pool.
- The slow lane takes turns: its endpoints waiting longest since their last claim go
  first (``Lane.turns``), so one slow endpoint's backlog cannot starve another's.
- ``started`` and ``finished`` come in pairs for every claimed attempt (a bug's outcome
  included); nothing here reads a clock or does I/O (``now`` is passed in).

An endpoint is what an attempt is counted and remembered by: today its webhook
(``endpoint_of``). Not thread-safe: the delivery loop calls it under its own lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from application.webhooks.delivery_ports import Claimed, Lane, Outcome

LaneName = Literal["fast", "slow"]
FAST: LaneName = "fast"
SLOW: LaneName = "slow"


@dataclass(frozen=True)
class LaneSettings:
    fast_pool: int = 32
    slow_pool: int = 8
    per_endpoint: int = 2
    slow_after: float = 1.0  # seconds; an attempt slower than this makes its endpoint slow


@dataclass(frozen=True)
class LanePlan:
    """One claim's shares: ``fast`` and ``slow`` in that order, with the per-endpoint
    cap and what is already in flight here (which the claim counts against the cap)."""

    fast: Lane
    slow: Lane
    per_endpoint: int
    in_flight: dict[str, int]


def endpoint_of(claimed: Claimed) -> str:
    """The endpoint an attempt counts against."""
    return claimed.delivery.webhook_id


def is_slow(outcome: Outcome, slow_after: float) -> bool:
    """Whether an attempt's outcome makes its endpoint slow: no answer, an error status
    or any failure, or an answer later than ``slow_after`` seconds."""
    failed = outcome.status is None or outcome.error is not None
    return failed or outcome.seconds > slow_after


class LanePolicy:
    def __init__(self, settings: LaneSettings) -> None:
        self.settings = settings
        self._in_flight: dict[str, int] = {}  # endpoint -> attempts in flight here
        self._lanes: dict[LaneName, int] = {FAST: 0, SLOW: 0}
        self._slow: set[str] = set()
        self._turns: dict[str, float] = {}  # endpoint -> its last claim here

    def plan(self) -> LanePlan | None:
        """The shares of the next claim; None when both lanes are full."""
        s = self.settings
        free_fast = s.fast_pool - self._lanes[FAST]
        free_slow = s.slow_pool - self._lanes[SLOW]
        if free_fast <= 0 and free_slow <= 0:
            return None
        full = {e for e, n in self._in_flight.items() if n >= s.per_endpoint}
        return LanePlan(
            fast=Lane(max(free_fast, 0), exclude=full | self._slow),
            slow=Lane(
                max(free_slow, 0), exclude=full, only=self._slow - full, turns=dict(self._turns)
            ),
            per_endpoint=s.per_endpoint,
            in_flight=dict(self._in_flight),
        )

    def started(self, claimed: Claimed, lane: LaneName, now: float) -> None:
        endpoint = endpoint_of(claimed)
        self._turns[endpoint] = now
        self._in_flight[endpoint] = self._in_flight.get(endpoint, 0) + 1
        self._lanes[lane] += 1

    def finished(self, claimed: Claimed, lane: LaneName, outcome: Outcome) -> None:
        endpoint = endpoint_of(claimed)
        if is_slow(outcome, self.settings.slow_after):
            self._slow.add(endpoint)
        else:
            self._slow.discard(endpoint)
        left = self._in_flight.get(endpoint, 0) - 1
        if left > 0:
            self._in_flight[endpoint] = left
        else:
            self._in_flight.pop(endpoint, None)
        self._lanes[lane] = max(self._lanes[lane] - 1, 0)

    def in_flight(self, lane: LaneName) -> int:
        return self._lanes[lane]

    def is_slow(self, endpoint: str) -> bool:
        return endpoint in self._slow
