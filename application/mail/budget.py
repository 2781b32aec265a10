"""The daily download budget of an account: counted where bodies are fetched, kept in a
ledger every worker shares, and deferring bodies once the day's count passes
``DEFER_AT`` of the provider's budget.

Days are UTC days: the count starts again at 00:00 UTC (the providers that set a
budget document a daily one and no window of their own). Past the threshold a session
fetches no more bodies; the messages it did not fetch stay after the account's cursor
(their metadata was read, nothing was recorded), so the first poll of the next day
fetches them — each once, like any other new mail. A budget may be overshot by at most
the page in flight when the threshold is crossed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from application.mail.ports import DownloadMeter
from application.mail.providers import ProviderTable

DEFER_AT = 0.8


def utc_day(now: datetime) -> str:
    """The budget's day of an instant (``YYYY-MM-DD``, UTC)."""
    if now.tzinfo is None:
        raise ValueError("the budget's clock must be timezone-aware")
    return now.astimezone(UTC).date().isoformat()


def allowance(budget_bytes: int, used_bytes: int) -> int:
    """What may still be fetched before deferral: the threshold minus what was used."""
    return int(budget_bytes * DEFER_AT) - max(0, used_bytes)


class DownloadLedger(Protocol):
    """Bytes downloaded per account per day, shared by every worker, durable."""

    def used(self, account_id: str, day: str) -> int: ...

    def add(self, account_id: str, day: str, nbytes: int) -> None:
        """Add to the day's count (a count kept for an earlier day starts again)."""
        ...


class AccountMeter:
    def __init__(
        self,
        ledger: DownloadLedger,
        account_id: str,
        budget_bytes: int,
        clock: Callable[[], datetime],
    ) -> None:
        self.ledger = ledger
        self.account_id = account_id
        self.budget_bytes = budget_bytes
        self.clock = clock

    def allowance(self) -> int:
        used = self.ledger.used(self.account_id, utc_day(self.clock()))
        return allowance(self.budget_bytes, used)

    def spend(self, nbytes: int) -> None:
        if nbytes > 0:
            self.ledger.add(self.account_id, utc_day(self.clock()), nbytes)


class ProviderBudgets:
    """``DownloadBudgets`` from the provider table: a meter for hosts with a budget."""

    def __init__(
        self, table: ProviderTable, ledger: DownloadLedger, clock: Callable[[], datetime]
    ) -> None:
        self.table = table
        self.ledger = ledger
        self.clock = clock

    def meter(self, account_id: str, host: str) -> DownloadMeter | None:
        budget = self.table.daily_budget(host)
        if budget is None:
            return None
        return AccountMeter(self.ledger, account_id, budget, self.clock)
