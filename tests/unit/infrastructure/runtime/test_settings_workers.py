"""The worker's settings: one source of defaults, one name per cadence."""

from __future__ import annotations

import logging

import pytest

from application import worker_defaults as defaults
from application.mail.account_sync import SyncSettings
from infrastructure.runtime.settings import Settings
from workers.policies.tiers import TierSettings
from workers.supervisor_settings import SupervisorSettings


def test_the_workers_settings_classes_default_to_what_the_settings_do() -> None:
    settings = Settings()
    supervisor = SupervisorSettings(worker_id="w")
    tiers = TierSettings()
    sync = SyncSettings()
    assert settings.poll_interval == supervisor.poll_warm == tiers.poll_warm
    assert settings.poll_cold == supervisor.poll_cold == tiers.poll_cold
    assert settings.watch_lease_ttl == supervisor.lease_ttl
    assert settings.watch_probe_after == supervisor.probe_after == defaults.WATCH_PROBE_AFTER
    assert settings.watch_probe_timeout == supervisor.probe_timeout
    assert settings.poll_concurrency == supervisor.poll_concurrency
    assert settings.poll_deadline == supervisor.poll_deadline
    assert settings.max_accounts_per_worker == supervisor.max_accounts_per_worker
    assert settings.hot_budget_per_worker == supervisor.hot_budget_per_worker
    assert settings.backfill_window_days == sync.backfill_window_days
    assert settings.max_messages_per_poll == sync.max_messages_per_poll
    assert settings.parse_concurrency == sync.parse_concurrency
    assert settings.poll_interval == defaults.POLL_INTERVAL
    assert settings.folder_notify is supervisor.folder_notify is defaults.FOLDER_NOTIFY is False


def test_poll_interval_is_the_cadence(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert Settings(poll_interval=60).poll_interval == 60
    monkeypatch.setenv("TIDINGS_POLL_INTERVAL", "45")
    with caplog.at_level(logging.WARNING, logger="tidings.settings"):
        assert Settings().poll_interval == 45
    assert caplog.records == []


def test_poll_warm_is_a_deprecated_alias_read_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="tidings.settings"):
        settings = Settings(poll_warm=42)
    assert settings.poll_interval == 42
    assert settings.poll_warm is None  # one cadence, one place to read it
    assert [r.getMessage() for r in caplog.records] == [
        "settings.deprecated name=poll_warm use=poll_interval"
    ]


def test_tidings_poll_warm_in_the_environment_is_the_alias_too(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TIDINGS_POLL_WARM", "42")
    with caplog.at_level(logging.WARNING, logger="tidings.settings"):
        assert Settings().poll_interval == 42
    assert len(caplog.records) == 1
    assert "name=poll_warm" in caplog.records[0].getMessage()


def test_with_both_names_set_poll_interval_wins_and_the_alias_is_reported_ignored(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TIDINGS_POLL_WARM", "42")
    monkeypatch.setenv("TIDINGS_POLL_INTERVAL", "60")
    with caplog.at_level(logging.WARNING, logger="tidings.settings"):
        assert Settings().poll_interval == 60
    assert "ignored=poll_warm" in caplog.records[0].getMessage()


def test_the_alias_is_validated_like_the_cadence() -> None:
    with pytest.raises(ValueError, match="poll_interval"):  # where its value went
        Settings(poll_warm=0)


def test_watch_dead_after_is_a_deprecated_alias_of_watch_probe_after(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TIDINGS_WATCH_DEAD_AFTER", "77")
    with caplog.at_level(logging.WARNING, logger="tidings.settings"):
        settings = Settings()
    assert settings.watch_probe_after == 77
    assert settings.watch_dead_after is None
    assert [r.getMessage() for r in caplog.records] == [
        "settings.deprecated name=watch_dead_after use=watch_probe_after"
    ]
    with caplog.at_level(logging.WARNING, logger="tidings.settings"):
        assert Settings(watch_probe_after=9).watch_probe_after == 9
    assert "ignored=watch_dead_after" in caplog.records[-1].getMessage()


def test_watch_probe_settings_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIDINGS_WATCH_PROBE_AFTER", "3")
    monkeypatch.setenv("TIDINGS_WATCH_PROBE_TIMEOUT", "2")
    settings = Settings()
    assert (settings.watch_probe_after, settings.watch_probe_timeout) == (3, 2)
    with pytest.raises(ValueError):
        Settings(watch_probe_timeout=0)
