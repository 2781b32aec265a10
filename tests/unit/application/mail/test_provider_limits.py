"""The provider table (matching by IMAP host) and the daily download budget's policy
(a fake clock and an in-memory ledger: day rollover, the 80% threshold)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta, timezone

import pytest

from application.mail.budget import DEFER_AT, AccountMeter, ProviderBudgets, allowance, utc_day
from application.mail.providers import (
    KNOWN_PROVIDERS,
    MB,
    UNKNOWN,
    ProviderLimits,
    ProviderTable,
)


@pytest.mark.parametrize(
    ("host", "name", "cap", "budget"),
    [
        ("imap.gmail.com", "gmail", 15, 2500 * MB),
        ("IMAP.Gmail.COM.", "gmail", 15, 2500 * MB),
        ("imap.googlemail.com", "gmail", 15, 2500 * MB),
        ("eu.imap.gmail.com", "gmail", 15, 2500 * MB),
        ("outlook.office365.com", "outlook", 15, None),
        ("imap-mail.outlook.com", "outlook", 15, None),
        ("imap.mail.yahoo.com", "yahoo", 10, None),
        ("imap.example.com", "unknown", 7, None),
        ("gmail.com.evil.example", "unknown", 7, None),
        ("notgmail.com", "unknown", 7, None),
        ("127.0.0.1", "unknown", 7, None),
    ],
)
def test_hosts_match_their_provider(host: str, name: str, cap: int, budget: int | None) -> None:
    table = ProviderTable()
    assert table.match(host).name == name
    assert table.conn_cap(host, default=7) == cap
    assert table.daily_budget(host) == budget


def test_an_operator_entry_comes_before_the_built_in_ones() -> None:
    mine = ProviderLimits("mine", ("imap.gmail.com", "127.0.0.1"), conn_cap=2, daily_budget_bytes=9)
    table = ProviderTable([mine])
    assert table.match("imap.gmail.com") is mine
    assert table.match("127.0.0.1") is mine
    assert table.match("eu.imap.gmail.com").name == "gmail"  # others keep their entry
    assert ProviderTable().match("127.0.0.1") is UNKNOWN


def test_an_exact_host_beats_a_wildcard_of_an_earlier_entry() -> None:
    wide = ProviderLimits("wide", ("*.example.com",), conn_cap=3)
    narrow = ProviderLimits("narrow", ("imap.example.com",), conn_cap=4)
    table = ProviderTable([wide, narrow], known=())
    assert table.match("imap.example.com") is narrow
    assert table.match("other.example.com") is wide
    assert table.match("example.com") is UNKNOWN  # a wildcard covers subdomains only


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError):
        ProviderLimits("x", ("h",), conn_cap=0)
    with pytest.raises(ValueError):
        ProviderLimits("x", ("h",), daily_budget_bytes=0)
    assert {p.name for p in KNOWN_PROVIDERS} == {"gmail", "outlook", "yahoo"}


class Ledger:
    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = defaultdict(int)

    def used(self, account_id: str, day: str) -> int:
        return self.counts[(account_id, day)]

    def add(self, account_id: str, day: str, nbytes: int) -> None:
        self.counts[(account_id, day)] += nbytes


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_allowance_is_what_is_left_below_eighty_percent() -> None:
    assert DEFER_AT == 0.8
    assert allowance(1000, 0) == 800
    assert allowance(1000, 799) == 1
    assert allowance(1000, 800) == 0
    assert allowance(1000, 1500) == -700


def test_the_budget_defers_past_eighty_percent_and_resets_at_the_next_utc_day() -> None:
    clock = Clock(datetime(2026, 3, 1, 23, 59, 0, tzinfo=UTC))
    ledger = Ledger()
    meter = AccountMeter(ledger, "a1", 1000, clock)
    assert meter.allowance() == 800
    meter.spend(500)
    meter.spend(0)
    meter.spend(-5)  # nothing negative is ever counted
    assert meter.allowance() == 300
    meter.spend(400)
    assert meter.allowance() == -100  # deferring
    other = AccountMeter(ledger, "a2", 1000, clock)
    assert other.allowance() == 800  # per account

    clock.now += timedelta(seconds=59)  # 23:59:59 UTC: still the same day
    assert meter.allowance() == -100
    clock.now += timedelta(seconds=1)  # 00:00 UTC: a new day, a new budget
    assert meter.allowance() == 800
    assert ledger.used("a1", "2026-03-01") == 900  # the old day's count is its own


def test_days_are_utc_days_whatever_the_clock_s_zone() -> None:
    tokyo = timezone(timedelta(hours=9))
    assert utc_day(datetime(2026, 3, 2, 8, 0, tzinfo=tokyo)) == "2026-03-01"
    assert utc_day(datetime(2026, 3, 2, 9, 0, tzinfo=tokyo)) == "2026-03-02"
    with pytest.raises(ValueError):
        utc_day(datetime(2026, 3, 2, 9, 0))  # a naive clock is refused


def test_only_hosts_with_a_budget_get_a_meter() -> None:
    clock = Clock(datetime(2026, 3, 1, tzinfo=UTC))
    budgets = ProviderBudgets(ProviderTable(), Ledger(), clock)
    gmail = budgets.meter("a1", "imap.gmail.com")
    assert gmail is not None and gmail.allowance() == 2000 * MB
    assert budgets.meter("a1", "outlook.office365.com") is None
    assert budgets.meter("a1", "imap.example.com") is None
