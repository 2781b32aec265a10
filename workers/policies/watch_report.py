"""What ``list-mail-accounts`` shows as an account's ``watchState`` and ``tier``, and
which of those rows this worker writes. Pure.

Each account is reported by the worker that holds it: the lease holder of a hot account
(``watching`` while a watch exists, ``backoff`` while its restart waits, else ``idle``),
the poll owner of a warm or cold one (``idle``). A hot account nobody holds is reported
by nobody. Rows are written only when they change (``changes``); an account this worker
stopped reporting is cleared, and a clear only touches a row this worker wrote last, so
a worker giving an account up never overwrites its new holder's row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from typing import Literal

from workers.policies.tiers import Tier

WatchState = Literal["watching", "backoff", "idle"]


@dataclass(frozen=True)
class WatchStatus:
    watch_state: WatchState
    tier: Tier


def statuses(
    tiers: Mapping[str, Tier],
    *,
    held: Set[str],
    watching: Set[str],
    backing_off: Set[str],
    owns_poll: Callable[[str], bool],
) -> dict[str, WatchStatus]:
    """This worker's report: every account it holds or polls (see the module docstring)."""
    report: dict[str, WatchStatus] = {}
    for account_id in held:
        state: WatchState = "idle"
        if account_id in watching:
            state = "watching"
        elif account_id in backing_off:
            state = "backoff"
        report[account_id] = WatchStatus(state, tiers.get(account_id, "hot"))
    for account_id, tier in tiers.items():
        if tier != "hot" and account_id not in report and owns_poll(account_id):
            report[account_id] = WatchStatus("idle", tier)
    return report


def changes(
    written: Mapping[str, WatchStatus], report: Mapping[str, WatchStatus]
) -> dict[str, WatchStatus | None]:
    """The rows to write to go from ``written`` to ``report`` (``None``: clear it)."""
    out: dict[str, WatchStatus | None] = {
        account_id: status
        for account_id, status in report.items()
        if written.get(account_id) != status
    }
    out.update(dict.fromkeys(written.keys() - report.keys()))
    return out
