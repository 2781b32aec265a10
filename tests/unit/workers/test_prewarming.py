"""The supervisor's parked sessions for a failover: parked for the orphans this worker
will claim, handed to the watch once claimed, closed when no longer expected."""

from __future__ import annotations

from typing import Any

from infrastructure.in_process.lease import InProcessLease
from workers.prewarming import Prewarmer

TTL = 90.0


class RecordingWatches:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.watching: set[str] = set()

    def start(self, account_id: str, *, parked: bool = False) -> int:
        self.calls.append(("start", account_id, "parked" if parked else "idle"))
        self.watching.add(account_id)
        return 1

    def stop(self, account_id: str, reason: str = "stopped") -> bool:
        self.calls.append(("stop", account_id, reason))
        self.watching.discard(account_id)
        return True

    def activate(self, account_id: str) -> bool:
        self.calls.append(("activate", account_id))
        return account_id in self.watching

    def is_watching(self, account_id: str) -> bool:
        return account_id in self.watching


def setup() -> tuple[Prewarmer, RecordingWatches]:
    lease = InProcessLease(TTL, holder="dead")  # the dead worker's leases, read by w1
    for account in ("a", "b"):
        assert lease.acquire(account)
    watches: Any = RecordingWatches()
    return Prewarmer("w1", lease, watches, ttl=TTL, capacity=100), watches


def test_orphans_are_parked_and_handed_over_when_claimed() -> None:
    prewarmer, watches = setup()
    live = {"w1": 0, "dead": 2}
    prewarmer.update(live, {"a", "b"}, set(), {"a": TTL * 0.4, "b": TTL * 0.4})
    assert sorted(watches.calls) == [("start", "a", "parked"), ("start", "b", "parked")]
    watches.calls.clear()
    assert prewarmer.take("a")  # the lease is ours now
    assert watches.calls == [("activate", "a")]
    assert not prewarmer.take("a")  # handed over once


def test_leases_renewed_again_close_the_parked_sessions() -> None:
    prewarmer, watches = setup()
    live = {"w1": 0, "dead": 2}
    prewarmer.update(live, {"a", "b"}, set(), {"a": TTL * 0.4, "b": TTL * 0.4})
    watches.calls.clear()
    prewarmer.update(live, {"a", "b"}, set(), {"a": TTL, "b": TTL})  # its holder lives
    assert sorted(watches.calls) == [("stop", "a", "unclaimed"), ("stop", "b", "unclaimed")]
    assert not prewarmer.take("a")


def test_no_orphans_no_sessions() -> None:
    prewarmer, watches = setup()
    prewarmer.update({"w1": 0, "dead": 2}, {"a", "b"}, set(), {"a": TTL, "b": TTL * 0.7})
    assert watches.calls == []
