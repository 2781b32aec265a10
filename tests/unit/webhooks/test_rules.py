"""The pure webhook rules: signatures (Stripe-style, with replay tolerance), the retry
schedule and its budget, event filters and URL shapes."""

from __future__ import annotations

import pytest

from application.webhooks.signature import SignatureError, sign, verify_signature
from domain.webhook import (
    BadEventFilter,
    BadWebhookUrl,
    RetryPolicy,
    check_filters,
    matches,
    parse_url,
)

BODY = b'{"id":"x","sequence":1}'


def test_a_signature_verifies_only_for_its_secret_body_and_time() -> None:
    header = sign("whsec_a", BODY, 1_700_000_000)
    assert verify_signature("whsec_a", header, BODY, now=1_700_000_100) == 1_700_000_000
    for secret, body, now in (
        ("whsec_b", BODY, 1_700_000_100),  # another secret
        ("whsec_a", BODY + b" ", 1_700_000_100),  # a changed body
        ("whsec_a", BODY, 1_700_000_301),  # replayed after the tolerance
        ("whsec_a", BODY, 1_699_999_600),  # from the future beyond the tolerance
    ):
        with pytest.raises(SignatureError):
            verify_signature(secret, header, body, tolerance=300, now=now)


def test_malformed_headers_are_refused() -> None:
    good = sign("s", BODY, 100)
    for header in ("", "t=100", "v1=abc", "t=abc,v1=00", good.replace("v1=", "v0="), "t=1," * 2000):
        with pytest.raises(SignatureError):
            verify_signature("s", header, BODY, now=100)
    # a second v1 (a receiver holding two secrets during a rotation) is accepted
    other = sign("old", BODY, 100).split(",")[1]
    assert verify_signature("s", f"{good},{other}", BODY, now=100) == 100


SUPERSCRIPT_TWO, ARABIC_100, FULLWIDTH_100 = "\u00b2", "\u0661\u0660\u0660", "\uff11\uff10\uff10"


@pytest.mark.parametrize(
    "stamp", [SUPERSCRIPT_TWO, "1" + SUPERSCRIPT_TWO, ARABIC_100, FULLWIDTH_100, "+100", " 100"]
)
def test_a_timestamp_of_anything_but_ascii_digits_is_a_signature_error(stamp: str) -> None:
    """``str.isdigit`` takes superscripts and other scripts' digits; ``int`` refuses
    some of them: either way the receiver gets ``SignatureError``, never a bare
    ``ValueError`` it would answer 500 for."""
    mac = sign("s", BODY, 100).split(",")[1]
    with pytest.raises(SignatureError):
        verify_signature("s", f"t={stamp},{mac}", BODY, now=100)


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
