"""The webhook settings: the delivery loop's caps default to the lane policy's, the cap
on a tenant's webhooks to the app policy's, and the old per-endpoint name is an alias."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from application.context import Policy
from infrastructure.runtime.settings import Settings
from workers.policies.webhook_lanes import LaneSettings


def test_the_webhook_settings_default_to_what_the_policies_do() -> None:
    settings, lanes = Settings(), LaneSettings()
    assert (settings.webhook_pool, settings.webhook_slow_pool) == (lanes.fast_pool, lanes.slow_pool)
    assert (settings.webhook_per_host, settings.webhook_per_tenant) == (
        lanes.per_host,
        lanes.per_tenant,
    )
    assert settings.webhook_limit_per_tenant == Policy().webhook_limit_per_tenant == 20


def test_the_caps_are_read_from_the_environment_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIDINGS_WEBHOOK_PER_HOST", "3")
    monkeypatch.setenv("TIDINGS_WEBHOOK_PER_TENANT", "5")
    monkeypatch.setenv("TIDINGS_WEBHOOK_LIMIT_PER_TENANT", "7")
    settings = Settings()
    assert (settings.webhook_per_host, settings.webhook_per_tenant) == (3, 5)
    assert settings.webhook_limit_per_tenant == 7
    bads: list[dict[str, Any]] = [
        {"webhook_per_host": 0},
        {"webhook_per_tenant": 0},
        {"webhook_limit_per_tenant": -1},
        {"webhook_limit_per_tenant": 10**9},
    ]
    for bad in bads:
        with pytest.raises(ValueError):
            Settings(**bad)


def test_webhook_per_endpoint_is_a_deprecated_alias_of_per_host(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TIDINGS_WEBHOOK_PER_ENDPOINT", "4")
    with caplog.at_level(logging.WARNING, logger="tidings.settings"):
        settings = Settings()
    assert settings.webhook_per_host == 4 and settings.webhook_per_endpoint is None
    assert [r.getMessage() for r in caplog.records] == [
        "settings.deprecated name=webhook_per_endpoint use=webhook_per_host"
    ]
    monkeypatch.setenv("TIDINGS_WEBHOOK_PER_HOST", "2")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tidings.settings"):
        assert Settings().webhook_per_host == 2
    assert "ignored=webhook_per_endpoint" in caplog.records[0].getMessage()
