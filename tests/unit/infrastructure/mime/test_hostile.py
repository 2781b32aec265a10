"""Hostile messages: the reader's decoding is total and bounded, and every text it returns
can enter an event (valid Unicode, no NUL), whatever the bytes say."""

from __future__ import annotations

import html
import re
import time
from datetime import UTC, datetime
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from application.mail.parsing import (
    MAX_ADDRESSES,
    MAX_HEADER_CHARS,
    MAX_REFERENCES,
    ParsedMessage,
)
from infrastructure.mime import headers
from infrastructure.mime.reader import parse_message

HEAD = b"From: a@example.org\r\nDate: Tue, 02 Jan 2024 10:30:00 +0000\r\n"
NOT_CHARSETS = [
    "unicode-escape",
    "raw-unicode-escape",
    "punycode",
    "idna",
    "rot13",
    "hex",
    "base64",
    "zlib",
    "undefined",
]


def texts(m: ParsedMessage) -> list[str]:
    values = [m.subject, m.snippet, m.message_id or "", m.in_reply_to or ""]
    values += [*m.references, *m.authentication_results, *m.defects]
    values += [s for a in (*m.sender, *m.to, *m.cc) for s in (a.name, a.address)]
    return values


def assert_storable(m: ParsedMessage) -> None:
    for text in texts(m):
        text.encode("utf-8")  # raises on a lone surrogate
        assert "\x00" not in text
    assert m.date is None or datetime(1970, 1, 1, tzinfo=UTC) <= m.date.astimezone(UTC)


@pytest.mark.parametrize("charset", NOT_CHARSETS)
def test_a_codec_that_is_not_a_charset_decodes_as_an_unknown_charset(charset: str) -> None:
    raw = HEAD + f"Content-Type: text/plain; charset={charset}\r\n\r\n".encode() + b"\\ud800 hi"
    m = parse_message(raw)
    assert m.snippet == "\\ud800 hi"  # the bytes as text, not their escape sequences
    assert "UnknownCharset" in m.defects and m.malformed
    assert_storable(m)


@pytest.mark.parametrize("charset", NOT_CHARSETS)
def test_an_encoded_word_in_a_codec_that_is_not_a_charset(charset: str) -> None:
    m = parse_message(HEAD + f"Subject: =?{charset}?q?=5Cud800x?=\r\n\r\nx".encode())
    assert m.subject == "\\ud800x" and "UnknownCharset" in m.defects
    assert_storable(m)


def test_a_real_charset_decoding_to_a_lone_surrogate_has_it_replaced() -> None:
    raw = HEAD + b"Content-Type: text/plain; charset=utf-7\r\n\r\nbefore +2D0- after"
    m = parse_message(raw)
    assert m.snippet == "before \ufffd after" and "LoneSurrogate" in m.defects
    assert_storable(m)


def test_escape_sequences_beside_an_encoded_word_stay_text() -> None:
    m = parse_message(HEAD + b"Subject: =?utf-8?q?caf=C3=A9?= \\ud800 \\x00\r\n\r\nx")
    assert "\ufffd" in m.subject or "\\ud800" in m.subject
    assert_storable(m)


def test_nul_and_controls_never_reach_the_text() -> None:
    raw = HEAD + b"Subject: a\x00b\x01c\r\nContent-Type: text/plain; charset=utf-16-le\r\n\r\n"
    m = parse_message(raw + "x\x00y".encode("utf-16-le"))
    assert m.subject == "abc" and "\x00" not in m.snippet
    assert_storable(m)


@pytest.mark.parametrize(
    "date",
    [
        "Fri, 31 Dec 9999 23:59:59 -2359",
        "Thu, 01 Jan 1900 00:00:00 +0000",
        "Mon, 01 Jan 2201 00:00:00 +0000",
        "Tue, 02 Jan 2024 10:30:00 +2300",
        "Tue, 02 Jan 2024 10:30:00 -1500",
    ],
)
def test_an_impossible_date_is_dropped_as_a_defect(date: str) -> None:
    m = parse_message(b"From: a@example.org\r\nDate: " + date.encode() + b"\r\n\r\nx")
    assert m.date is None and "ImpossibleDate" in m.defects and m.malformed


def test_real_offsets_at_the_edges_are_kept() -> None:
    for date in ("Tue, 02 Jan 2024 10:30:00 +1400", "Tue, 02 Jan 2024 10:30:00 -1200"):
        m = parse_message(b"From: a@example.org\r\nDate: " + date.encode() + b"\r\n\r\nx")
        assert m.date is not None and not m.malformed, date


def test_header_values_are_capped() -> None:
    m = parse_message(HEAD + b"Subject: " + b"s" * (MAX_HEADER_CHARS * 5) + b"\r\n\r\nx")
    assert len(m.subject) <= MAX_HEADER_CHARS and "HeaderTooLong" in m.defects


def test_address_lists_are_capped() -> None:
    lines = [
        "To: " + ", ".join(f"u{line}.{i}@example.org" for i in range(100)) + "\r\n"
        for line in range(MAX_ADDRESSES // 100 + 5)
    ]
    m = parse_message(HEAD + "".join(lines).encode() + b"\r\nx")
    assert len(m.to) == MAX_ADDRESSES and "TooManyAddresses:to" in m.defects


def test_reference_lists_are_capped() -> None:
    lines = [
        "References: " + " ".join(f"<r{line}.{i}@example.org>" for i in range(100)) + "\r\n"
        for line in range(MAX_REFERENCES // 100 + 5)
    ]
    m = parse_message(HEAD + "".join(lines).encode() + b"\r\nx")
    assert len(m.references) == MAX_REFERENCES and "TooManyReferences" in m.defects


def test_repeated_headers_are_capped() -> None:
    m = parse_message(HEAD + b"Authentication-Results: mx; dmarc=pass\r\n" * 5000 + b"\r\nx")
    assert len(m.authentication_results) == 100 and "TooManyHeaders" in m.defects


header_bytes = st.binary(max_size=300).map(lambda b: b.replace(b"\n", b" ").replace(b"\r", b" "))
charsets = st.sampled_from([*NOT_CHARSETS, "utf-7", "utf-8", "utf-16", "latin-1", "x-bogus"])


@settings(max_examples=200, deadline=None)
@given(subject=header_bytes, sender=header_bytes, date=header_bytes, body=st.binary(max_size=400))
def test_arbitrary_header_bytes_give_storable_text(
    subject: bytes, sender: bytes, date: bytes, body: bytes
) -> None:
    raw = b"From: " + sender + b"\r\nDate: " + date + b"\r\nSubject: " + subject + b"\r\n\r\n"
    assert_storable(parse_message(raw + body))


@settings(max_examples=200, deadline=None)
@given(charset=charsets, word=st.binary(max_size=60), body=st.binary(max_size=400))
def test_arbitrary_charsets_give_storable_text(charset: str, word: bytes, body: bytes) -> None:
    encoded = "".join(f"={b:02X}" for b in word).encode()
    raw = (
        HEAD
        + b"Subject: =?"
        + charset.encode()
        + b"?q?"
        + encoded
        + b"?=\r\nContent-Type: text/plain; charset="
        + charset.encode()
        + b"\r\n\r\n"
    )
    assert_storable(parse_message(raw + body))


# -- bounded time: no decode path rescans the rest of the text from each position ---------

# What the snippet's HTML stripping means (the regexes it used to be, quadratic on
# unclosed tags and comments, fine on short text).
REFERENCE_HIDDEN = re.compile(
    r"<(script|style|head|title)\b.*?</\1\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL
)
REFERENCE_TAG = re.compile(r"<[^>]*>")
HTML_TOKENS = ["<script>", "</script>", "</SCRIPT >", "<style x>", "</style>", "<head>"]
HTML_TOKENS += ["</head>", "<title>", "</title>", "<scripts>", "<!--", "-->", "<", ">"]
HTML_TOKENS += ["a", "b ", " ", "&amp;", "<p>", "</p>", "<!-- c -->"]


def html_message(body: str) -> bytes:
    return HEAD + b"Content-Type: text/html; charset=utf-8\r\n\r\n" + body.encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(HTML_TOKENS), max_size=40).map("".join))
def test_html_stripping_keeps_its_meaning(body: str) -> None:
    text = html.unescape(REFERENCE_TAG.sub(" ", REFERENCE_HIDDEN.sub(" ", body)))
    expected = " ".join(text.split())[:200].rstrip()
    assert parse_message(html_message(body)).snippet == expected


NAME_TOKENS = ["Ann", " ", "  ", "\t", "=?utf-8?q?Zo=C3=AB?=", '"Q, R"', "a@b.example"]
NAME_TOKENS += ["<c@d.example>", ",", ", "]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(NAME_TOKENS), max_size=12).map("".join))
def test_address_parsing_keeps_its_meaning(value: str) -> None:
    m = parse_message(HEAD + b"To: " + value.encode() + b"\r\n\r\nx")
    with mock.patch.object(headers, "_SIMPLE_ADDRESS", REFERENCE_SIMPLE_ADDRESS):
        reference = parse_message(HEAD + b"To: " + value.encode() + b"\r\n\r\nx")
    assert m.to == reference.to


_ADDR = r"[^<>\s@\",;:()\\]+@[^<>\s@\",;:()\\]+"
REFERENCE_SIMPLE_ADDRESS = re.compile(
    rf'\s*(?:(?:"([^"\\]*)"|([^<>@,";:\\()]*?))\s*<({_ADDR})>|({_ADDR}))\s*(?:,|$)'
)

ADVERSARIAL = {
    "unclosed comments": html_message("<!--" * 16_000),
    "unclosed scripts": html_message("<script>" * 8_000),
    "unclosed tags": html_message("<a " * 20_000),
    "spaces before no bracket": HEAD + (b"To: x" + b" " * 9_990 + b"y\r\n") * 100 + b"\r\nx",
    "long parameter lists": HEAD
    + b'Content-Type: multipart/mixed; boundary="x"; '
    + b"a=b; " * 200_000
    + b"\r\n\r\n--x\r\nContent-Type: text/plain; charset=utf-8; "
    + b"a=b; " * 200_000
    + b"\r\n\r\nthe text\r\n--x--\r\n",
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_shapes_parse_in_linear_time(name: str) -> None:
    # The regexes these replaced were quadratic on each of them.
    started = time.perf_counter()
    assert_storable(parse_message(ADVERSARIAL[name]))
    assert time.perf_counter() - started < 5.0


def test_parameters_far_out_in_a_header_are_not_read_but_the_message_is() -> None:
    m = parse_message(ADVERSARIAL["long parameter lists"])
    assert m.snippet == "the text"
