"""The fast scan (``mime_scan``) must change nothing but speed: every message gives the same
``ParsedMessage`` with the scan as with the full compat32 parser, and when the scan builds a
tree it is the parser's tree (headers, payloads, defects; preambles and epilogues aside).

The same holds for message content (text, sanitized HTML, the attachment index): the
content of the scan's tree is the content of the parser's tree, and the streaming content
reader (``mime.content``), which never builds a tree, gives that same content for the
fixtures and the benchmark corpus (malformed ones included) wherever
the message stays within its bounds (depth, part count, header size), is not message/*
(kept whole), has no base64 of an impossible length and no bare CR line ends (the
reader's lines end at LF only).

Inputs: the message fixtures of the other tests, the benchmark corpus, generated MIME
variations and seeded random damage to all of those.
"""

from __future__ import annotations

import base64
import io
import quopri
import random
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from email.parser import BytesParser
from email.policy import compat32
from functools import partial
from typing import Any, cast
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from application.mail.content import MessageContent
from application.mail.parsing import ParsedMessage
from bench._mail import big_message, corpus, mail
from infrastructure.mime import content as mime_content
from infrastructure.mime import parts as mime_parts
from infrastructure.mime import reader as mime
from infrastructure.mime import scan as mime_scan
from infrastructure.mime.bounded import BoundedMessage
from infrastructure.mime.charsets import CONTROL
from infrastructure.mime.snippet import collapse
from tests.integration.mail.helpers import raw_mail
from tests.integration.mail.test_content import CORPUS
from tests.support import content_corpus
from tests.support.messages import make_message
from tests.unit.infrastructure.mime.test_parser import RAW
from tests.unit.infrastructure.mime.test_reader import (
    DATE,
    HTML_PART,
    MALFORMED,
    PLAIN_PART,
    SIMPLE,
    _big_message,
    _multipart,
)


@contextmanager
def _full_parser_only() -> Iterator[None]:
    with mock.patch.object(mime_scan, "parse", return_value=None):
        yield


def _shape(msg: Message) -> tuple[Any, ...]:
    if msg.is_multipart():
        body: Any = [_shape(p) for p in cast(list[Message], msg.get_payload())]
    else:
        body = msg._payload  # type: ignore[attr-defined]  # as stored, not decoded
    defects = [type(d).__name__ for d in msg.defects]
    return (list(msg.raw_items()), msg.get_default_type(), msg.get_unixfrom(), defects, body)


def _parse_file(raw: bytes, head_bytes: int) -> ParsedMessage:
    return mime.parse_message_file(io.BytesIO(raw), head_bytes=head_bytes)


def assert_same(raw: bytes, head_bytes: tuple[int, ...] = (), *, streamed: bool = False) -> bool:
    """Fast and full results agree (bytes, and files cut at ``head_bytes``); True when
    the fast scan handled the message."""
    calls = [
        partial(mime.parse_message, raw),
        partial(mime.parse_message, raw, snippet_chars=7),
        *(partial(_parse_file, raw, h) for h in head_bytes),
    ]
    for call in calls:
        fast = call()
        with _full_parser_only():
            assert fast == call()
    tree = mime_scan.parse(raw)
    full = BytesParser(BoundedMessage, policy=compat32).parsebytes(raw)
    if tree is not None:
        assert _shape(tree) == _shape(full)
        assert tree_content(tree) == tree_content(full)
    if streamed:
        _assert_streamed_content(raw, full)
    return tree is not None


def _assert_streamed_content(raw: bytes, full: Message) -> None:
    streamed = mime_content.StreamingContentReader().read(io.BytesIO(raw), message_id="m")
    # Past its bounds the reader skips; base64 of an impossible length the stdlib gives
    # back undecoded (the reader would have to hold all of it), the reader decodes.
    beyond = {"TooDeep", "TooManyParts", "HeadersTooLong", "InvalidBase64Length"}
    in_bounds = not beyond & set(streamed.defects)
    lf_lines = mime_scan._BARE_CR.search(raw.decode("latin-1")) is None
    if in_bounds and lf_lines and not _has_message_part(full):
        assert _content_fields(streamed) == tree_content(full)


def _has_message_part(msg: Message) -> bool:
    return any(part.get_content_maintype() == "message" for part in msg.walk())


def _content_fields(content: MessageContent) -> tuple[Any, ...]:
    return content.text, content.html, content.attachments, content.truncated


def tree_content(msg: Message) -> tuple[Any, ...]:
    """The content of a parsed tree, each leaf decoded by the stdlib
    (``get_payload(decode=True)``): the reference for the streaming reader."""
    builder = mime_parts.ContentBuilder("m")

    def walk(part: Message, path: str) -> None:
        if part.is_multipart():
            for i, child in enumerate(cast(list[Message], part.get_payload()), 1):
                walk(child, f"{path}.{i}" if path else str(i))
            return
        payload = part.get_payload(decode=True)
        body = payload if isinstance(payload, bytes) else b""
        builder.leaf(mime_parts.head_of(part, path or "1", builder.defects), iter([body]))

    walk(msg, "")
    return _content_fields(builder.result())


# -- fixtures of the other tests ----------------------------------------------------------------

_ATTACHMENT = (
    b"Content-Type: text/plain\r\nContent-Disposition: attachment; filename=a.txt\r\n\r\nx"
)
_INNER = b'Content-Type: multipart/alternative; boundary="INNER"\r\n\r\n--INNER\r\n' + PLAIN_PART
_UTF8_FROM = b"From: J\xc3\xbcrgen <j@example.org>\r\n" + DATE
FIXTURES: dict[str, bytes] = {
    **{f"malformed:{name}": raw for name, raw in MALFORMED.items()},
    **{f"content:{name}": raw for name, raw in CORPUS.items()},
    "simple": SIMPLE,
    "adapter": RAW,
    "long_plain": b"From: a@b\r\n" + DATE + b"\r\n" + b"word " * 500,
    "alternative": _multipart([HTML_PART, PLAIN_PART]),
    "html_only": _multipart([HTML_PART]),
    "nested": _multipart([_ATTACHMENT, _INNER + b"\r\n--INNER--"], b"mixed"),
    "base64": _multipart(
        [
            b"Content-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: base64\r\n"
            b"\r\n" + base64.b64encode("Grüße aus Köln".encode("iso-8859-1"))
        ]
    ),
    "qp": _multipart(
        [
            b"Content-Type: text/plain; charset=windows-1252\r\n"
            b"Content-Transfer-Encoding: quoted-printable\r\n\r\n=93quoted=94 soft=\r\n broken"
        ]
    ),
    "utf8_headers": _UTF8_FROM + b"Subject: \xc3\xbcber\r\n\r\nx",
    "latin1_headers": _UTF8_FROM + b"Subject: \xfcber caf\xe9\r\n\r\nx",
    "big": _big_message(300_000),
    "long_headers": b"From: a@b\r\n" + DATE + (b"X-Pad: " + b"p" * 990 + b"\r\n") * 100 + b"\r\nb",
    "naive_date": b"From: a@b\r\nDate: Tue, 02 Jan 2024 10:30:00 -0000\r\n\r\nx",
    "rebuild_broken": b"Subject: broken\r\n\r\nno sender\r\n",
    "raw_mail": raw_mail(3, subject="Grüße", extra_headers="X-A: b\r\n", pad_to=3000),
    "make_message": make_message(4, body="hello\r\n-- \r\nsig", pad_to=2000),
    "bench_big": big_message(400_000),
    "content:rich": content_corpus.rich_message(),
    "content:hostile names": content_corpus.hostile_names_message(),
    "content:bad base64 parts": content_corpus.bad_base64_message(),
    "content:many parts": content_corpus.many_parts_message(50),
    "content:deep": content_corpus.deep_message(6),
    "content:big attachment": content_corpus.big_attachment_message(200_000),
}
FIXTURES |= {f"lf:{name}": raw.replace(b"\r\n", b"\n") for name, raw in FIXTURES.items()}


@pytest.mark.parametrize("name", FIXTURES)
def test_the_fixtures_parse_the_same(name: str) -> None:
    raw = FIXTURES[name]
    assert_same(raw, head_bytes=(64 * 1024, 10_000, 700, len(raw) // 2 + 1), streamed=True)


def test_ordinary_fixtures_take_the_fast_path() -> None:
    for name in ("simple", "adapter", "alternative", "nested", "base64", "qp", "big", "lf:nested"):
        assert mime_scan.parse(FIXTURES[name]) is not None, name


# -- the benchmark's messages -------------------------------------------------------------------


def test_bench_mail_parses_the_same_and_fast() -> None:
    subjects = ("plain", "Réunion ✓ déjà", "=?utf-8?q?R=C3=A9union?=", "a" * 300)
    for n in range(500):
        raw = mail(n, f"{subjects[n % len(subjects)]} {n}")
        assert assert_same(raw), n  # the fast path was taken


def test_bench_corpus_parses_the_same_and_fast_unless_a_header_line_is_broken() -> None:
    for i, raw in enumerate(corpus(600, seed=11)):
        fast = assert_same(raw, head_bytes=(2048,), streamed=True)
        with _full_parser_only():
            reference = mime.parse_message(raw)
        assert fast == ("MissingHeaderBodySeparatorDefect" not in reference.defects), i


# -- generated variations -----------------------------------------------------------------------

_WORDS = st.sampled_from(
    ["hello", "caf\xe9", "Gr\xfc\xdfe", "\u201cq\u201d", "--", "-- ", "=3D", "<b>x</b>", "&amp;",
     "\t", "\x00", "\x07", "=?utf-8?q?x?=", "", "  ", "--B", "--BOUNDARY--", "From me", ":"]
)  # fmt: skip
_EOL = st.sampled_from([b"\r\n", b"\n"])
_CHARSET = st.sampled_from(
    ["", "; charset=utf-8", '; charset="iso-8859-1"', "; charset=x-klingon", "; CHARSET=latin-1",
     "; charset*=utf-8''utf-8", "; charset=us-ascii", "; charset=\xe9"]
)  # fmt: skip
_CTE = st.sampled_from(
    [None, "7bit", "8bit", "binary", "quoted-printable", "base64", "Base64", "x-uuencode", "bogus"]
)  # fmt: skip
_ODD_LINES = st.sampled_from(
    [b"no colon here", b"From someone", b": no name", b" continued", b"Bad Name: x", b"X-Empty:",
     b"X-Nul: a\x00b", b"X-8bit: \xe9\xff", b"X-CR: a\rb", b"--B", b"X-Fold:", b"\t folded",
     b"\x0bvertical tab", b"\x0cform: feed", b"\x1cX: y", b"\xe9X: y"]
)  # fmt: skip
_TOP_HEADERS = st.sampled_from(
    [b"From: Ada <ada@example.org>", b'From: "Bob, Jr" <bob@example.org>', b"From: a@b (c)",
     b"From: =?utf-8?b?w4lsaWU=?= <e@x.example>", b"From: J\xc3\xbcrgen <j@x.example>",
     b"To: a@x, b@y, =?iso-8859-1?q?Zo=EB?= <z@z>", b"Cc: <<<@@@>>>, ;;;", b"Cc: g: a@b, c@d;",
     b"Subject: hello", b"Subject: =?utf-8?q?R=C3=A9union?= now", b"Subject: =?x?b?!!?=",
     b"Subject: caf\xe9", DATE.rstrip(), b"Date: someday", b"Message-ID: <m@x.example>",
     b"In-Reply-To: <p@x>", b"References: <a@x>\r\n <b@x>", b"MIME-Version: 1.0",
     b"Authentication-Results: mx.example; dmarc=pass", b"X-Mailer: test"]
)  # fmt: skip


def _line(draw: st.DrawFn) -> bytes:
    words = draw(st.lists(_WORDS, max_size=12))
    return " ".join(words).encode(draw(st.sampled_from(["utf-8", "latin-1"])), "replace")


def _body(draw: st.DrawFn, eol: bytes, cte: str | None) -> bytes:
    text = eol.join(_line(draw) for _ in range(draw(st.integers(0, 6))))
    encoded = (cte or "").lower()
    if encoded == "quoted-printable" and draw(st.booleans()):
        return quopri.encodestring(text).replace(b"\n", eol)
    if encoded == "base64" and draw(st.booleans()):
        data = base64.encodebytes(text).replace(b"\n", eol)
        return data if draw(st.booleans()) else data.rstrip(b"=\r\n") + b"!*"
    return text


def _boundary(draw: st.DrawFn) -> tuple[str, str]:
    """A Content-Type boundary parameter, and the boundary its lines use (sometimes another)."""
    token = draw(st.sampled_from(["B", "BOUNDARY", "b1", "=_x+y/z", "a b", "B'(),.:?", "-B"]))
    param = draw(
        st.sampled_from(
            [f'; boundary="{token}"', f"; boundary={token}", f'; BOUNDARY="{token}"',
             f"; boundary*=us-ascii''{token}", "", '; boundary=""', f'; boundary="{token} "',
             f';\r\n boundary="{token}"']
        )
    )  # fmt: skip
    return param, draw(st.sampled_from([token, token, token, "OTHER", token + "x"]))


def _entity(draw: st.DrawFn, eol: bytes, depth: int) -> list[bytes]:  # noqa: C901
    """The lines of a message or part: headers, blank line, body."""
    kind = draw(st.sampled_from(["leaf"] * 3 + ["multipart"] * (depth < 3) + ["message"]))
    head: list[bytes] = []
    body: list[bytes]
    if kind == "multipart":
        subtype = draw(st.sampled_from(["mixed", "alternative", "related", "digest"]))
        param, token = _boundary(draw)
        head.append(f"Content-Type: multipart/{subtype}{param}".encode())
        if draw(st.integers(0, 9)) == 0:
            head.append(b"Content-Transfer-Encoding: base64")
        body = [_line(draw) for _ in range(draw(st.integers(0, 2)))]  # preamble
        for _ in range(draw(st.integers(0, 3))):
            tail = draw(st.sampled_from(["", "", "  ", "--x", "x"]))
            body.append(f"--{token}{tail}".encode())
            if draw(st.integers(0, 9)) == 0:
                body.append(f"--{token}".encode())  # a repeated boundary line
            body += _entity(draw, eol, depth + 1)
        close = draw(st.sampled_from(["--", "--", "-- ", "", None]))
        if close is not None:
            body.append(f"--{token}{close}".encode())
        body += [_line(draw) for _ in range(draw(st.integers(0, 2)))]  # epilogue
    elif kind == "message":
        head.append(b"Content-Type: message/rfc822")
        body = _entity(draw, eol, depth + 1)
    else:
        ctype = draw(
            st.sampled_from(
                ["text/plain", "text/html", "TEXT/Plain", "application/pdf", "text", None]
            )
        )
        if ctype is not None:
            head.append(f"Content-Type: {ctype}{draw(_CHARSET)}".encode("latin-1"))
        cte = draw(_CTE)
        if cte is not None:
            head.append(f"Content-Transfer-Encoding: {cte}".encode())
        if draw(st.booleans()):
            head.append(draw(st.sampled_from([b"Content-Disposition: attachment", b"X-A: b"])))
        body = [_body(draw, eol, cte)]
    if depth == 0:
        head = draw(st.lists(_TOP_HEADERS, max_size=8)) + head
    head = draw(st.permutations(head))
    if draw(st.integers(0, 5)) == 0:
        head.insert(draw(st.integers(0, len(head))), draw(_ODD_LINES))
    return [*head, b"", *body]


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    eol = draw(_EOL)
    lines = _entity(draw, eol, 0)
    if draw(st.integers(0, 4)) == 0:  # mixed line ends
        return b"".join(line + draw(_EOL) for line in lines)
    return eol.join(lines) + draw(st.sampled_from([eol, b""]))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.integers(1, 4000))
def test_generated_messages_parse_the_same(raw: bytes, head_bytes: int) -> None:
    assert_same(raw, head_bytes=(head_bytes,))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_parse_the_same(raw: bytes) -> None:
    assert_same(b"From: a@b\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\n" + raw)


# -- seeded damage to real-looking mail ---------------------------------------------------------


def _damage(raw: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(raw) + 1)
    cut = rng.randrange(at, min(len(raw), at + 40) + 1)
    return rng.choice(
        [
            raw[:at],  # truncated
            raw[:at] + raw[cut:],  # a piece dropped
            raw[:at] + rng.choice([b"\r", b"\n", b"\r\n", b"--", b"\x00", b"\xe9"]) + raw[at:],
            raw[:at] + raw[at:cut] * 2 + raw[cut:],  # a piece repeated
            raw[:at] + bytes(rng.randrange(256) for _ in range(3)) + raw[cut:],
            raw.replace(b"\r\n", b"\n", rng.randrange(1, 40)),
        ]
    )


def test_damaged_messages_parse_the_same() -> None:
    rng = random.Random(20240601)
    small = {k: v for k, v in FIXTURES.items() if len(v) < 20_000}
    sources = [*small.values(), *corpus(60, seed=5, size=2048)]
    for _ in range(2000):
        raw = rng.choice(sources)
        for _ in range(rng.randint(1, 3)):
            raw = _damage(raw, rng)
        assert_same(raw, head_bytes=(rng.randrange(1, 3000),))


# -- the one change to the shared tail ----------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(st.text(st.sampled_from("ab \t\n\r\x00\x1f\xa0\u2028é")), st.integers(-3, 30))
def test_collapse_equals_collapsing_the_whole_text(text: str, limit: int) -> None:
    whole = " ".join(CONTROL.sub(" ", text).split())[:limit].rstrip()
    assert collapse(text, limit) == whole
