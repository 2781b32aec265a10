"""The retention sweeper on fakes: the lease (one sweeper at a time, lost mid-run),
batches until each kind's cursor runs out, one ``now`` per run, counts per kind."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from application.retention.ports import SweepBatch
from application.retention.sweeper import LEASE_KEY, RetentionSweeper

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.at = NOW

    def now(self) -> datetime:
        self.at += timedelta(seconds=1)  # a second run sees a later instant
        return self.at


class Lease:
    """One key, tokens per acquisition; ``lose_after`` renewals, then "not yours"."""

    def __init__(self, lose_after: int | None = None) -> None:
        self.token: str | None = None
        self.renewals = 0
        self.lose_after = lose_after
        self.acquired = 0

    @property
    def ttl_seconds(self) -> float:
        return 60.0

    def acquire(self, key: str) -> str | None:
        assert key == LEASE_KEY
        if self.token is not None:
            return None
        self.acquired += 1
        self.token = f"tok-{self.acquired}"
        return self.token

    def held_by(self, keys: Iterable[str]) -> dict[str, tuple[float, str]]:
        return {key: (60.0, "") for key in keys if key == LEASE_KEY and self.token is not None}

    def acquire_many(self, keys: Iterable[str]) -> dict[str, str | None]:
        return {key: self.acquire(key) for key in keys}

    def renew(self, key: str, token: str) -> bool:
        self.renewals += 1
        return token == self.token and (self.lose_after is None or self.renewals <= self.lose_after)

    def release(self, key: str, token: str) -> bool:
        mine = token == self.token
        if mine:
            self.token = None
        return mine

    def renew_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        return {key: self.renew(key, token) for key, token in items.items()}

    def release_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        return {key: self.release(key, token) for key, token in items.items()}

    def held(self, keys: Iterable[str]) -> dict[str, float]:
        return {key: 60.0 for key in keys if self.token is not None}

    def holders(self, keys: Iterable[str]) -> dict[str, str]:
        return {key: "" for key in keys if self.token is not None}


class Sweep:
    """``items`` expired items of one tenant, handed out ``limit`` at a time."""

    def __init__(self, kind: str, items: int) -> None:
        self.kind = kind
        self.items = items
        self.calls: list[tuple[datetime, Any, int, bool]] = []

    def batch(self, now: datetime, after: Any, limit: int, dry_run: bool) -> SweepBatch:
        self.calls.append((now, after, limit, dry_run))
        start = 0 if after is None else after
        found = min(limit, self.items - start)
        end = start + found
        return SweepBatch(
            found=found,
            recorded=0 if dry_run else found,
            next=end if found == limit else None,
            counts=Counter({("t1", "contact.note", "delete"): found}) if found else Counter(),
        )


def test_batches_until_each_kind_is_swept_against_one_instant() -> None:
    values, mail = Sweep("values", 5), Sweep("mail", 0)
    lease = Lease()
    report = RetentionSweeper([values, mail], Clock(), lease, batch_size=2).run()
    assert report is not None and not report.interrupted
    assert [after for _, after, _, _ in values.calls] == [None, 2, 4]
    assert {now for now, *_ in values.calls + mail.calls} == {NOW + timedelta(seconds=1)}
    assert (report.found, report.recorded, report.batches) == (5, 5, 4)
    assert report.counts == Counter({("values", "t1", "contact.note", "delete"): 5})
    assert lease.token is None  # released


def test_a_dry_run_records_nothing() -> None:
    sweep = Sweep("values", 3)
    report = RetentionSweeper([sweep], Clock(), Lease(), batch_size=10).run(dry_run=True)
    assert report is not None and (report.found, report.recorded) == (3, 0)
    assert all(dry for *_, dry in sweep.calls)


def test_a_lease_held_elsewhere_means_no_run() -> None:
    lease = Lease()
    assert lease.acquire(LEASE_KEY) is not None
    sweep = Sweep("values", 3)
    assert RetentionSweeper([sweep], Clock(), lease).run() is None
    assert sweep.calls == []


def test_a_lost_lease_stops_the_run_after_the_batch() -> None:
    sweep = Sweep("values", 10)
    report = RetentionSweeper([sweep], Clock(), Lease(lose_after=1), batch_size=2).run()
    assert report is not None and report.interrupted and report.batches == 2


def test_max_batches_stops_the_run() -> None:
    sweep = Sweep("values", 10)
    report = RetentionSweeper([sweep], Clock(), Lease(), batch_size=2).run(max_batches=3)
    assert report is not None and report.interrupted and report.recorded == 6


@pytest.mark.parametrize("size", [0, -1, 100_001])
def test_the_batch_size_is_bounded(size: int) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        RetentionSweeper([], Clock(), Lease(), batch_size=size)
