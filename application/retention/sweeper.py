"""The retention sweeper: every kind's sweep, batch by batch, one sweeper at a time.

State machine of one ``run``: acquire the lease (held elsewhere: answer ``None``, do
nothing) -> for each kind, batches until its cursor runs out, renewing the lease after
each batch (lost: stop, ``interrupted``) -> release. ``now`` is read once from the clock
port at the start, so one run sweeps against one instant. Nothing is kept between runs:
a run after a crash starts over, and the sweeps' own idempotence (an expiry is recorded
only while the item's stream still says it is due) makes that safe.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from application.leases import LeaseBackend
from application.ports import Clock
from application.retention.ports import RetentionSweep

LEASE_KEY = "retention-sweeper"
BATCH_SIZE = 1000
MAX_BATCH_SIZE = 100_000

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    now: datetime
    dry_run: bool
    batches: int = 0
    found: int = 0
    recorded: int = 0
    interrupted: bool = False  # the lease was lost, or ``max_batches`` reached
    # (kind, tenant, subject, action) -> items found
    counts: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)


class RetentionSweeper:
    def __init__(
        self,
        sweeps: Sequence[RetentionSweep],
        clock: Clock,
        lease: LeaseBackend,
        *,
        batch_size: int = BATCH_SIZE,
    ) -> None:
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must lie within 1..{MAX_BATCH_SIZE}")
        self.sweeps = tuple(sweeps)
        self.clock = clock
        self.lease = lease
        self.batch_size = batch_size

    def run(self, *, dry_run: bool = False, max_batches: int | None = None) -> SweepReport | None:
        """Sweep everything expired now; None when another sweeper holds the lease."""
        token = self.lease.acquire(LEASE_KEY)
        if token is None:
            return None
        report = SweepReport(now=self.clock.now(), dry_run=dry_run)
        try:
            self._sweep(report, token, max_batches)
        finally:
            self.lease.release(LEASE_KEY, token)
        log.info(
            "retention swept dry_run=%s batches=%d found=%d recorded=%d interrupted=%s",
            dry_run,
            report.batches,
            report.found,
            report.recorded,
            report.interrupted,
        )
        return report

    def _sweep(self, report: SweepReport, token: str, max_batches: int | None) -> None:
        for sweep in self.sweeps:
            after = None
            while True:
                if max_batches is not None and report.batches >= max_batches:
                    report.interrupted = True
                    return
                batch = sweep.batch(report.now, after, self.batch_size, report.dry_run)
                report.batches += 1
                report.found += batch.found
                report.recorded += batch.recorded
                for (tenant, subject, action), count in batch.counts.items():
                    report.counts[sweep.kind, tenant, subject, action] += count
                if not self.lease.renew(LEASE_KEY, token):
                    report.interrupted = True
                    return
                if batch.next is None:
                    break
                after = batch.next
