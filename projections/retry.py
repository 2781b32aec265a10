"""Retrying one quarantined event: the runner's ``retry`` (the console's retry button).

It reaches into the runner's own steps (the tracking-row lock, the savepoint attempt,
the quarantine write) so a retried event is applied exactly as a batch's would be.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from application.ports import RetryOutcome, Unreadable
from projections import quarantine
from projections.base import Projection

if TYPE_CHECKING:
    from projections.runner import ProjectionRunner


def retry_quarantined(
    runner: ProjectionRunner, projection: Projection, position: int
) -> RetryOutcome:
    """Apply one quarantined event again, alone, in a transaction that holds the
    projection's tracking row (no batch of it runs meanwhile). Applied: it leaves
    the quarantine, in the same commit. Failed again: it stays, with the new error.

    The event is applied after the events that followed it, as a rebuild would
    not: an operator retries once the cause is fixed (the projection's code, or the
    row it needed), the bet a rebuild makes for every event, at the cost of one."""
    name = projection.name
    with runner.db.transaction() as cur:
        runner._locked_position(cur, name)
        if position < 1 or not quarantine.held(cur, name, position):
            return "absent"
        found = [e for e in runner.log.scan(position - 1, 1) if e.position == position]
        if not found:
            return "absent"
        (entry,) = found
        if isinstance(entry, Unreadable):
            runner._apply(cur, projection, [entry])  # quarantined again, error renewed
            return "failed"
        error = runner._attempt(cur, projection, [entry])
        if error is None:
            quarantine.release(cur, name, position)
            return "applied"
        tenant = getattr(entry.event, "tenant_id", None)
        runner._quarantine(
            cur,
            projection,
            position=position,
            tenant_id=tenant if isinstance(tenant, str) else None,
            topic=entry.event.TOPIC,
            error=error,
        )
        return "failed"
