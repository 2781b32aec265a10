"""``X-Tidings-Content-Type`` carries a sender's declared type reduced to
``type/subtype`` tokens: nothing a sender folds or injects reaches a header."""

from __future__ import annotations

import pytest

from infrastructure.http.api import media_type


@pytest.mark.parametrize(
    ("declared", "sent"),
    [
        ("text/plain; charset=utf-8", "text/plain"),
        ("Application/PDF", "application/pdf"),
        ("image/svg+xml", "image/svg+xml"),
        ("text/plain;\r\n\tname=evil", "text/plain"),
        ("text/html\r\nSet-Cookie: a=b", "text/html"),
        ('application/x-evil\r\n\tfoo"', "application/x-evil"),
        ("text/plain\x00", "application/octet-stream"),
        ('"text/plain"', "application/octet-stream"),
        ("text\r\n /plain", "application/octet-stream"),
        ("tëxt/plain", "application/octet-stream"),
        ("", "application/octet-stream"),
        ("noslash", "application/octet-stream"),
        ("a/" + "b" * 200, "application/octet-stream"),
    ],
)
def test_a_declared_type_is_reduced_to_type_and_subtype(declared: str, sent: str) -> None:
    assert media_type(declared) == sent
