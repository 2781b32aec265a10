"""The token endpoint's answer is hostile input: strict parsing, one refusal
(``invalid_grant``), everything else transient."""

from __future__ import annotations

import json

import pytest

from application.mail.oauth import TokenRefusedGrant, TokenServerError
from infrastructure.oauth.token_client import check_token_url, nesting_within, parse_answer


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_a_valid_answer_with_rotation() -> None:
    answer = parse_answer(200, body(access_token="at-1", expires_in=60, refresh_token="rt-2"))
    assert (answer.access_token, answer.expires_in, answer.refresh_token) == ("at-1", 60.0, "rt-2")
    assert "at-1" not in repr(answer) and "rt-2" not in repr(answer)


def test_defaults_and_a_numeric_string_expiry() -> None:
    answer = parse_answer(200, body(access_token="at", token_type="bearer", expires_in="90"))
    assert (answer.expires_in, answer.refresh_token) == (90.0, None)
    assert parse_answer(200, body(access_token="at")).expires_in == 3600.0


@pytest.mark.parametrize("status", [400, 401])
def test_invalid_grant_is_the_one_refusal(status: int) -> None:
    with pytest.raises(TokenRefusedGrant):
        parse_answer(status, body(error="invalid_grant"))


@pytest.mark.parametrize(
    ("status", "raw"),
    [
        (503, body(error="invalid_grant")),  # a 5xx never disables an account
        (500, b"<html>oops</html>"),
        (429, body(error="slow_down")),
        (400, body(error="invalid_client")),
        (400, b"not json"),
        (200, b""),
        (200, b"[]"),
        (200, b"\xff\xfe"),
        (200, body(expires_in=60)),
        (200, body(access_token="", expires_in=60)),
        (200, body(access_token="a b", expires_in=60)),
        (200, body(access_token="a\r\nb", expires_in=60)),
        (200, body(access_token="a\x01b", expires_in=60)),
        (200, body(access_token="é", expires_in=60)),
        (200, body(access_token="x" * 9000, expires_in=60)),
        (200, body(access_token=["at"], expires_in=60)),
        (200, body(access_token="at", token_type="mac")),
        (200, body(access_token="at", expires_in=0)),
        (200, body(access_token="at", expires_in=-1)),
        (200, body(access_token="at", expires_in=10**12)),
        (200, body(access_token="at", expires_in=True)),
        (200, body(access_token="at", expires_in="soon")),
        (200, body(access_token="at", refresh_token="")),
        (200, body(access_token="at", refresh_token="r\nt")),
        (200, body(access_token="at", refresh_token=7)),
    ],
)
def test_anything_else_is_transient(status: int, raw: bytes) -> None:
    with pytest.raises(TokenServerError):
        parse_answer(status, raw)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/token",  # cleartext only where private hosts are allowed
        "ftp://example.com/token",
        "https:///token",
        "https://user:pw@example.com/token",
        "https://example.com/token#frag",
        "https://example.com:99999/token",
    ],
)
def test_a_bad_token_url_is_refused(url: str) -> None:
    with pytest.raises(ValueError):
        check_token_url(url, allow_http=False)


def test_http_is_allowed_only_when_asked() -> None:
    assert check_token_url("http://127.0.0.1:8080/token", allow_http=True).port == 8080
    assert check_token_url("https://example.com/token", allow_http=False).hostname == "example.com"


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 32_768 + b"]" * 32_768,  # 64 KB of nesting: RecursionError in json.loads
        b'{"access_token": "at", "x": ' + b"{" * 40 + b"}" * 40 + b"}",
        b"[" * 64_000,  # unterminated
    ],
)
def test_deep_nesting_is_a_server_error_not_a_crash(raw: bytes) -> None:
    with pytest.raises(TokenServerError):
        parse_answer(200, raw)
    with pytest.raises(TokenServerError):
        parse_answer(400, raw)  # not an invalid_grant either


def test_nesting_is_counted_outside_strings_only() -> None:
    assert nesting_within(b'{"a": "[[[[{{{{"}', 1)
    assert nesting_within(b'{"a": "\\"[[["}', 1)
    assert not nesting_within(b'{"a": [[1]]}', 2)
    assert parse_answer(200, body(access_token="at", note="[" * 100)).access_token == "at"
