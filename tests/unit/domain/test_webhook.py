"""The pure webhook rules of the domain: the retry schedule and its budget, event
filters and URL shapes."""

from __future__ import annotations

import pytest

from domain.webhook import (
    BadEventFilter,
    BadWebhookUrl,
    RetryPolicy,
    check_filters,
    matches,
    parse_url,
)


def test_retries_back_off_exponentially_with_jitter_within_the_budget() -> None:
    policy = RetryPolicy(first=5, longest=3600, budget=24 * 3600)
    highs = [policy.next_delay(n, 0, lambda: 1.0) for n in range(1, 12)]
    lows = [policy.next_delay(n, 0, lambda: 0.0) for n in range(1, 12)]
    assert highs[:4] == [5, 10, 20, 40] and lows[:4] == [2.5, 5, 10, 20]
    assert max(d for d in highs if d is not None) == 3600
    assert policy.next_delay(3, 24 * 3600 - 10, lambda: 1.0) is None  # budget spent: dead
    elapsed, attempts = 0.0, 1
    while (delay := policy.next_delay(attempts, elapsed, lambda: 0.5)) is not None:
        elapsed += delay
        attempts += 1
    assert elapsed <= 24 * 3600 and 10 < attempts < 60


def test_filters_match_types_and_prefixes() -> None:
    assert check_filters(["message.", "message.", "*"]) == ["*", "message."]
    assert matches(["mail_account."], "mail_account.connected")
    assert not matches(["mail_account."], "message.received")
    assert matches(["message.received"], "message.received")
    assert not matches(["message.rec"], "message.received")
    for bad in ([], ["MESSAGE."], ["message.*"], ["a b"], ["../x"]):
        with pytest.raises(BadEventFilter):
            check_filters(bad)


def test_urls_are_http_or_https_with_a_host() -> None:
    target = parse_url("https://hooks.example.com/in?x=1")
    assert (target.scheme, target.host, target.port, target.path) == (
        "https",
        "hooks.example.com",
        443,
        "/in?x=1",
    )
    assert parse_url("http://[::1]:8080").path == "/"
    for bad in ("gopher://x/", "http:///x", "http://u@h/", "http://h/\r\nX: y", "h" * 3000):
        with pytest.raises(BadWebhookUrl):
            parse_url(bad)


def test_a_destination_is_scheme_host_and_port_whatever_the_path_or_spelling() -> None:
    same = {
        parse_url(url).destination
        for url in (
            "https://hooks.example.com/a",
            "https://HOOKS.example.com:443/b?x=1",
            "https://hooks.example.com./c",
        )
    }
    assert same == {"https://hooks.example.com:443"}
    assert parse_url("http://hooks.example.com/").destination == "http://hooks.example.com:80"
    assert parse_url("http://[::1]:8080/x").destination == "http://[::1]:8080"
