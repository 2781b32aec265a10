"""``provider_limits``: an operator's provider table entries, from the environment (JSON)
or keywords; what is not a valid entry is refused at start-up, never half applied."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from application.mail.providers import MB
from infrastructure.bootstrap import provider_table
from infrastructure.runtime.settings import Settings


def test_entries_come_from_the_environment_and_go_before_the_built_in_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "TIDINGS_PROVIDER_LIMITS",
        '{"imap.gmail.com": {"conn_cap": 3}, "*.example.com": '
        '{"name": "ex", "conn_cap": 2, "daily_budget_mb": 0.5}}',
    )
    table = provider_table(Settings())
    assert table.conn_cap("imap.gmail.com", default=99) == 3
    assert table.daily_budget("imap.gmail.com") is None  # the entry replaces gmail's limits
    assert table.conn_cap("eu.imap.gmail.com", default=99) == 15  # not this host's entry
    assert table.match("imap.example.com").name == "ex"
    assert table.daily_budget("imap.example.com") == MB // 2
    monkeypatch.delenv("TIDINGS_PROVIDER_LIMITS")
    assert provider_table(Settings()).daily_budget("imap.gmail.com") == (2500 * MB)


@pytest.mark.parametrize(
    "entries",
    [
        {"h": {"conn_cap": 0}},
        {"h": {"conn_cap": -1}},
        {"h": {"daily_budget_mb": 0}},
        {"h": {"daily_budget_mb": -5}},
        {"h": {"daily_budget_mb": "lots"}},
        {"h": {"conn_cap": 2, "unknown": 1}},
        {"h": {"name": ""}},
        {"h": {"name": "x" * 65}},
        {"": {"conn_cap": 1}},
        {"h" * 254: {"conn_cap": 1}},
        {"h": "15"},
        ["imap.gmail.com"],
    ],
)
def test_a_bad_entry_is_refused(entries: Any) -> None:
    with pytest.raises(ValidationError):
        Settings(provider_limits=entries)


def test_bad_json_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDINGS_PROVIDER_LIMITS", '{"h": {"conn_cap": ')
    with pytest.raises(Exception, match="provider_limits"):
        Settings()
