"""Which watch leases this worker holds, when to renew them and when to give up.

Per account:

    (absent) --claim--> pending(generation) --on_acquired, same generation--> held
    pending  --on_acquired, stale generation--> (absent)   caller releases the token at once
    pending  --on_acquire_failed--> (absent)               someone else holds it
    pending | held --stop--> (absent)                      held: caller releases the token
    held --renew answered True--> held                     valid_until = sent_at + ttl
    held --renew answered False ("not yours")--> (absent)  Teardown("lost"): stop the watcher now
    held --now >= valid_until - margin--> (absent)         Teardown("expired"): renew errors
                                                           spanned the ttl; stop the watcher

Invariants:

- ``valid_until`` is the time the last successful acquire/renew was *sent* plus the ttl,
  so the backend's own expiry is never earlier; the keeper gives a lease up ``margin``
  before that, hence this worker never keeps watching under a lease the backend may
  already have handed to another worker.
- A generation is taken from one counter per keeper and never reused; ``stop`` forgets
  the pending generation, so a lease acquired for a watcher stopped meanwhile is never
  kept ("stale": release it at once).
- A renew answer only counts for the token it was sent for: a lease re-acquired while a
  renew batch was in flight is not touched by that batch's answers.
- Renewals are batched: every ``ttl / 3`` all held leases are renewed in one call
  (``LeaseBackend.renew_many``); after a failed batch the next try comes sooner (``ttl / 9``).

The supervisor's loop, each tick::

    for t in keeper.expired(now): stop watcher t.account_id
    if keeper.due(now):
        batch = keeper.start_renewal(now)
        try: results = lease.renew_many(batch.tokens)
        except LeaseBackendUnavailable: teardowns = keeper.on_renew_failed(batch, clock())
        else: teardowns = keeper.on_renew_results(batch, results)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

TeardownReason = Literal["lost", "expired"]


@dataclass(frozen=True)
class Claim:
    account_id: str
    generation: int


@dataclass(frozen=True)
class Teardown:
    account_id: str
    reason: TeardownReason
    token: str


@dataclass(frozen=True)
class RenewBatch:
    sent_at: float
    tokens: Mapping[str, str]


@dataclass
class _Held:
    token: str
    valid_until: float


class LeaseKeeper:
    def __init__(self, ttl: float, *, margin: float | None = None) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.ttl = ttl
        self.interval = ttl / 3
        self.retry_interval = ttl / 9
        self.margin = ttl / 10 if margin is None else margin
        if not 0 <= self.margin < ttl - self.interval:
            raise ValueError("margin must leave time for a renewal")
        self._generations = itertools.count(1)
        self._pending: dict[str, int] = {}
        self._held: dict[str, _Held] = {}
        self._next_renew_at: float | None = None
        # At most the earliest ``valid_until`` held (exact after a renewal or a scan): the
        # supervisor asks ``expired`` and ``next_wakeup`` on every turn, and a scan of
        # thousands of leases each time cost the worker more than the answers were worth.
        self._soonest = math.inf

    # --- acquiring and stopping --------------------------------------------------------

    def claim(self, account_id: str) -> Claim | None:
        """A watcher wants this account: acquire its lease with the returned claim.

        None when it is already held or an acquire is under way (nothing to do)."""
        if account_id in self._held or account_id in self._pending:
            return None
        generation = next(self._generations)
        self._pending[account_id] = generation
        return Claim(account_id, generation)

    def on_acquired(self, claim: Claim, token: str, sent_at: float) -> bool:
        """The lease was acquired (``sent_at``: taken before the call). False = stale:
        the watcher was stopped meanwhile; release ``token`` at once, start nothing."""
        if self._pending.get(claim.account_id) != claim.generation:
            return False
        del self._pending[claim.account_id]
        if not self._held:  # the renewal cadence starts with the first held lease
            self._next_renew_at = sent_at + self.interval
        self._held[claim.account_id] = _Held(token, sent_at + self.ttl)
        self._soonest = min(self._soonest, sent_at + self.ttl)
        return True

    def on_acquire_failed(self, claim: Claim) -> None:
        if self._pending.get(claim.account_id) == claim.generation:
            del self._pending[claim.account_id]

    def stop(self, account_id: str) -> str | None:
        """The watcher stops: forget the account; returns the token to release, if held."""
        self._pending.pop(account_id, None)
        held = self._held.pop(account_id, None)
        return held.token if held is not None else None

    def stop_all(self) -> dict[str, str]:
        """Shutdown: account -> token of every held lease (for ``LeaseBackend.release_many``)."""
        tokens = {account_id: held.token for account_id, held in self._held.items()}
        self._pending.clear()
        self._held.clear()
        self._soonest = math.inf
        return tokens

    # --- what is held --------------------------------------------------------------------

    def holds(self, account_id: str) -> bool:
        return account_id in self._held

    def held_accounts(self) -> frozenset[str]:
        return frozenset(self._held)

    def pending_accounts(self) -> frozenset[str]:
        return frozenset(self._pending)

    def __len__(self) -> int:
        return len(self._held)

    # --- renewing ------------------------------------------------------------------------

    def due(self, now: float) -> bool:
        return bool(self._held) and self._next_renew_at is not None and now >= self._next_renew_at

    def start_renewal(self, now: float) -> RenewBatch:
        self._next_renew_at = now + self.interval
        return RenewBatch(now, {account_id: held.token for account_id, held in self._held.items()})

    def on_renew_results(self, batch: RenewBatch, results: Mapping[str, bool]) -> list[Teardown]:
        """Apply a batch's answers; returns the leases lost ("not yours"): stop those now."""
        lost: list[Teardown] = []
        for account_id, token in batch.tokens.items():
            held = self._held.get(account_id)
            if held is None or held.token != token or account_id not in results:
                continue  # stopped or re-acquired meanwhile, or not answered
            if results[account_id]:
                held.valid_until = max(held.valid_until, batch.sent_at + self.ttl)
            else:
                del self._held[account_id]
                lost.append(Teardown(account_id, "lost", token))
        self._rescan()
        return lost

    def on_renew_failed(self, batch: RenewBatch, now: float) -> list[Teardown]:
        """The backend did not answer: retry sooner; returns the leases past their validity."""
        self._next_renew_at = min(batch.sent_at + self.interval, now + self.retry_interval)
        return self.expired(now)

    def expired(self, now: float) -> list[Teardown]:
        """Leases whose validity (minus the margin) has run out: stop those watchers now.
        Call every tick, also while a renewal is under way."""
        if now < self._soonest - self.margin:
            return []
        gone = [
            account_id
            for account_id, held in self._held.items()
            if now >= held.valid_until - self.margin
        ]
        teardowns = [
            Teardown(account_id, "expired", self._held.pop(account_id).token) for account_id in gone
        ]
        self._rescan()
        return teardowns

    def next_wakeup(self) -> float | None:
        """The earliest time ``due`` or ``expired`` may change its answer (None: nothing
        held). Possibly a little early, after a stop: ``expired`` then looks again."""
        if not self._held:
            return None
        earliest = self._soonest - self.margin
        if self._next_renew_at is not None:
            earliest = min(earliest, self._next_renew_at)
        return earliest

    def _rescan(self) -> None:
        self._soonest = min((held.valid_until for held in self._held.values()), default=math.inf)
