"""The fast FETCH parser (``fetch_response.parse_fetch``) must change nothing but speed: on
every input it gives what imapclient's ``parse_fetch_response(data, normalise_times,
uid_is_key=True)`` gives (or raises what it raises), reading the usual shapes itself and
handing the rest to imapclient. Inputs are raw imaplib data: lines, each ``bytes`` or
``(text ending in "{size}", literal)``.
"""

from __future__ import annotations

import imaplib
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from imapclient.response_parser import parse_fetch_response

from application.mail.ports import MailboxTransientError
from infrastructure.imap import fetch_response
from infrastructure.imap.fetch_response import fallback_count, parse_fetch
from tests.unit.infrastructure.imap.test_session import FakeClient, FakeImap, raw, session

HDR = b"BODY[HEADER.FIELDS (MESSAGE-ID DATE)]"
HEADERS = b"Message-ID: <1.x@example.org>\r\nDate: Mon, 1 Jan 2024 00:00:00 +0000\r\n\r\n"
BODY = b"Subject: (tricky) {5}\r\n\r\nNUL \x00, 8-bit \xe9\xff, CRLF\r\n, a ) and a {3}\r\n)"


def plain(value: Any) -> Any:
    """``value`` with its types spelled out: == alone takes 1 for 1.0 and compares aware
    datetimes by instant, whatever their zone."""
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return ("tuple", *map(plain, value))
    if isinstance(value, datetime):
        zone = (type(value.tzinfo), value.utcoffset(), value.tzname())
        return ("datetime", value.replace(tzinfo=None), zone)
    return (type(value), value)


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return plain(fn(*args))
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def check(data: list[Any], *, fast: bool | None = True, normalise: bool = False) -> Any:
    """Assert that both parsers agree; ``fast``: whether the fast path must (not) be taken
    (None: either). Returns the answer."""
    expected = outcome(parse_fetch_response, data, normalise, True)
    before = fallback_count()
    got = outcome(lambda d: parse_fetch(d, normalise_times=normalise), data)
    assert got == expected
    if fast is not None:
        assert (fallback_count() == before) is fast, "fast path" if fast else "fallback"
    raised = isinstance(got, tuple) and got[0] == "raised"
    return None if raised else parse_fetch(data, normalise_times=normalise)


def test_metadata_of_several_messages_as_dovecot_sends_it() -> None:
    data = [
        (
            b'1 (UID 11 RFC822.SIZE 3714 INTERNALDATE "30-Nov-2026 23:01:24 +0000" '
            b"FLAGS (\\Seen \\Answered $Forwarded Junk) " + HDR + b" {%d}" % len(HEADERS),
            HEADERS,
        ),
        b")",
        (
            b'2 (UID 12 RFC822.SIZE 5 INTERNALDATE " 1-Jan-2024 00:00:00 -0800" FLAGS () '
            + HDR
            + b" {0}",
            b"",
        ),
        b")",
    ]
    got = check(data)
    assert got[11] == {
        b"SEQ": 1,
        b"RFC822.SIZE": 3714,
        b"INTERNALDATE": got[11][b"INTERNALDATE"],
        b"FLAGS": (b"\\Seen", b"\\Answered", b"$Forwarded", b"Junk"),
        HDR: HEADERS,
    }
    assert got[12][b"FLAGS"] == () and got[12][HDR] == b""
    assert got[12][b"INTERNALDATE"].utcoffset().total_seconds() == -8 * 3600


@pytest.mark.parametrize("normalise", [False, True])
@pytest.mark.parametrize(
    "when",
    [
        b"30-Nov-2026 23:01:24 +0000",
        b" 5-Jul-1999 01:02:03 +0530",
        b"29-Feb-2024 12:00:00 -0130",
        b"01-Jan-2024 00:00:00 -0000",  # "zone unknown" to RFC 5322, UTC to email.utils
        b"31-Dec-9999 23:59:59 +2359",
    ],
)
def test_internaldate_in_the_canonical_form(when: bytes, normalise: bool) -> None:
    check([b'7 (UID 70 INTERNALDATE "%s")' % when], normalise=normalise)


@pytest.mark.parametrize("normalise", [False, True])
@pytest.mark.parametrize(
    "value",
    [
        b'"31-Feb-2024 00:00:00 +0000"',  # no such day: imapclient answers None
        b'"01-Jan-2024 24:00:00 +0000"',
        b'"Mon, 1 Jan 2024 00:00:00 +0000"',  # RFC 822, not IMAP
        b'"01-JAN-2024 00:00:00 +0000"',
        b'"01-Jan-0099 00:00:00 +0000"',  # a two-digit year to email.utils
        b'"01-Jan-2024 00:00:00 +2400"',
        b'"01-Jan-2024 00:00:00 GMT"',
        b'"garbage"',
        b"NIL",
        b"12",
        b"(1 2)",
    ],
)
def test_unusual_internaldates_go_to_imapclient(value: bytes, normalise: bool) -> None:
    check([b"7 (UID 70 INTERNALDATE " + value + b")"], fast=False, normalise=normalise)


def test_bodies_as_literals_whatever_they_hold() -> None:
    data = [
        (b"1 (UID 5 BODY[] {%d}" % len(BODY), BODY),
        b")",
        (b"2 (UID 6 BODY[] {%d}" % len(HEADERS), HEADERS),
        (b" BODY[]<0> {3}", b"}}}"),
        b" FLAGS (\\Seen))",
    ]
    got = check(data)
    assert got[5][b"BODY[]"] == BODY and got[6][b"BODY[]<0>"] == b"}}}"


def test_partial_bodies() -> None:
    check([(b"3 (UID 30 BODY[]<0> {5}", b"12345"), b")"])
    check([(b"3 (UID 30 BODY[]<4000> {0}", b""), b")"])
    check([b'3 (UID 30 BODY[]<4000> "")', b"4 (UID 40 BODY[]<4000> NIL)"])


def test_quoted_strings_and_their_escapes() -> None:
    for text in [
        rb'""',
        rb'"plain text (with parens) and {braces}"',
        rb'"a \"quoted\" word"',
        rb'"back\\slash and \\\" both"',
        rb'"unknown \x escape kept"',
        rb'"ends in a backslash\\"',
        b'"8-bit \xe9 and %"',
    ]:
        check([b"1 (UID 1 X-NOTE " + text + b" FLAGS ())"])


def test_object_ids_gmail_ids_modseq_and_atoms() -> None:
    got = check(
        [
            b"1 (UID 9 EMAILID (M6d99ac3275bb4e) THREADID (T64b478a75b7ea9fb) "
            b"X-GM-MSGID 1278455344230334865 X-GM-THRID 1266894439832287888 "
            b"MODSEQ (624140003) X-ATOM abc]def X-ZERO 0 X-LEADING-ZERO 0123 "
            b"X-NIL NIL X-LIST (1 NIL 0123 \\Seen \\*))"
        ]
    )
    assert got[9][b"EMAILID"] == (b"M6d99ac3275bb4e",)
    assert got[9][b"X-GM-MSGID"] == 1278455344230334865
    assert got[9][b"X-LEADING-ZERO"] == b"0123" and got[9][b"X-LIST"][:3] == (1, None, b"0123")


def test_items_in_any_order_any_case() -> None:
    check([b'1 (FLAGS () RFC822.SIZE 10 INTERNALDATE "01-Jan-2024 00:00:00 +0000" UID 11)'])
    check([(b"1 (flags (\\seen) uid 11 body[] {2}", b"hi"), b" rfc822.size 2)"])


def test_unsolicited_responses_for_other_messages_and_repeats() -> None:
    got = check(
        [
            b"4 (FLAGS (\\Deleted))",  # no UID: imapclient keys it by sequence number
            (b"1 (UID 11 BODY[] {2}", b"hi"),
            b")",
            b"2 (UID 12 FLAGS (\\Seen) MODSEQ (12))",
            b"1 (UID 11 FLAGS (\\Flagged))",  # a second response for UID 11: merged
        ]
    )
    assert set(got) == {4, 11, 12}
    assert got[11] == {b"SEQ": 1, b"BODY[]": b"hi", b"FLAGS": (b"\\Flagged",)}


def test_nothing_fetched() -> None:
    check([None])
    check([])
    check([b""])


@pytest.mark.parametrize(
    "data",
    [
        [b"garbage"],
        [b"* 1 FETCH (UID 1)"],
        [b"1 UID 1"],
        [b"(UID 1)"],
        [b"1 (UID)"],
        [b"1 (UID 1"],  # not closed
        [b"1 (UID 1))"],
        [b"1 (UID x)"],
        [b"1 (UID 01)"],
        [b"01 (UID 1)"],
        [b"1 (UID NIL)"],
        [b"1 (1 2)"],
        [b"1 (NIL 2)"],
        [b'1 ("UID" 2)'],
        [b"1 (UID\t1)"],
        [b"1 (UID  1)"],
        [b"1 (UID 1 FLAGS(\\Seen))"],
        [b"1 (UID 1 FLAGS (\\Seen%))"],
        [b"1 (UID 1 FLAGS (\\Seen\x00))"],
        [b'1 (UID 1 X "unterminated)'],
        [b'1 (UID 1 X "a"b)'],
        [b"1 (UID 1 X (a (b c)))"],  # nested lists: left to imapclient
        [b"1 (UID 1 X [a b])"],
        [b"1 (UID 1 BODY[] {3})"],  # a literal's size without the literal
        [(b"1 (UID 1 BODY[] {10}", b"short"), b")"],
        [(b"1 (UID 1 BODY[]{2}", b"hi"), b")"],
        [(b"1 (UID 1)", b"stray literal")],
        [(b"1 (UID 1 X ({2}", b"hi"), b"))"],
        [(b"1 (UID 1 X {2}", "str")],
        [b"1 (UID 1)", 5],
        [b"1 (UID 1", None],
        [b"1 (UID 1)2 (UID 2)"],
        [
            b'1 (UID 1 ENVELOPE ("Mon, 1 Jan 2024 00:00:00 +0000" "hi" NIL NIL NIL NIL NIL '
            b'NIL NIL "<1@x>"))'
        ],
        [
            b'1 (UID 1 BODYSTRUCTURE ("TEXT" "PLAIN" ("CHARSET" "utf-8") NIL NIL "7BIT" 12 1 '
            b"NIL NIL NIL NIL))"
        ],
        [b"1 (UID 1 BODY NIL)"],
    ],
)
def test_anything_else_goes_to_imapclient(data: list[Any]) -> None:
    check(data, fast=False)


def test_a_failure_of_the_fast_path_is_left_to_imapclient(monkeypatch: Any) -> None:
    def broken(data: list[Any], normalise_times: bool) -> Any:
        raise IndexError("a bug")

    monkeypatch.setattr(fetch_response, "_parse", broken)
    got = check([(b"1 (UID 5 BODY[] {2}", b"hi"), b")"], fast=False)
    assert got == {5: {b"SEQ": 1, b"BODY[]": b"hi"}}


def test_several_messages_on_one_line_and_spare_spaces() -> None:
    check([b"1 (UID 1) 2 (UID 2 FLAGS ())  "])
    check([(b"1 (UID 1 BODY[] {1}", b"x"), b") 2 (UID 2)"])


# -- generated responses -------------------------------------------------------------------

_NAMES = [
    b"UID",
    b"uid",
    b"INTERNALDATE",
    b"FLAGS",
    b"RFC822.SIZE",
    b"BODY[]",
    b"BODY[]<0>",
    HDR,
    b"EMAILID",
    b"X-GM-MSGID",
    b"MODSEQ",
    b"X-A]B",
    b"X",
]
_ODD_NAMES = [b"NIL", b"12", b"0123", b"BODY", b"X{1}", b"[X]"]
_ATOMS = [
    b"0",
    b"7",
    b"0123",
    b"4294967295",
    b"NIL",
    b"nil",
    b"\\Seen",
    b"\\*",
    b"$Label",
    b"a]b",
    b"a{b",
    b"\xe9t\xe9",
]
_ODD_ATOMS = [b"a[b]", b"[x]", b"{2}", b"a%b", b"a\x00b", b"a\rb"]
_DATES = [
    b'"01-Jan-2024 00:00:00 +0000"',
    b'" 1-Jan-2024 10:00:00 -0000"',
    b'"31-Feb-2024 00:00:00 +0000"',
    b'"1 Jan 2024 00:00:00 +0000"',
]
_quoted = st.binary(max_size=12).map(
    lambda b: b'"' + b.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
) | st.sampled_from([rb'"\x"', rb'"a\\"', b'"a\\\\\\"b"'])


@st.composite
def _responses(draw: Any) -> list[Any]:  # noqa: C901
    """imaplib data for a few messages, built token by token and cut into lines after each
    literal; about half of them odd somewhere (imapclient's turn)."""
    odd = draw(st.booleans())

    def pick(usual: list[bytes], rare: list[bytes]) -> bytes:
        chosen: bytes = draw(st.sampled_from(usual * 8 + rare if odd else usual))
        return chosen

    atoms = st.sampled_from(_ATOMS + (_ODD_ATOMS if odd else []))
    literals = st.binary(max_size=20).map(lambda b: ("literal", b))
    simple = atoms | _quoted | literals if odd else atoms | _quoted
    values: st.SearchStrategy[Any] = simple | st.lists(simple, max_size=4).map(
        lambda v: ("list", v)
    )
    if odd:
        values = values | st.lists(values, max_size=3).map(lambda v: ("list", v))
    lines: list[Any] = []
    text = b""

    def emit(value: Any) -> None:
        nonlocal text
        if isinstance(value, tuple) and value[0] == "literal":
            lines.append((text + b"{%d}" % len(value[1]), value[1]))
            text = b""
        elif isinstance(value, tuple):
            text += b"("
            for i, item in enumerate(value[1]):
                text += pick([b" "], [b"", b"  ", b"\t"]) if i else b""
                emit(item)
            text += b")"
        else:
            text += value

    for _ in range(draw(st.integers(1, 3))):
        text += pick([b"1", b"2", b"3"], [b"01", b"NIL", b"-1"]) + pick([b" "], [b""]) + b"("
        for i in range(draw(st.integers(0, 4))):
            text += pick([b" "], [b"", b"  ", b"\t"]) if i else b""
            name = pick(_NAMES, _ODD_NAMES)
            text += name + pick([b" "], [b"", b"  "])
            if odd and draw(st.integers(0, 9)) == 0:
                emit(draw(st.sampled_from(_DATES)))
            elif name == b"INTERNALDATE":
                emit(pick(_DATES[:2], _DATES[2:]))
            elif name.upper() == b"UID":
                emit(pick([b"1", b"7", b"4294967295"], [b"01", b"NIL", b'"1"']))
            elif draw(st.integers(0, 4)) == 0:
                emit(("literal", draw(st.binary(max_size=20))))
            else:
                emit(draw(values))
        text += b")" + pick([b" "], [b"", b")"])
    lines.append(text)
    return lines


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_responses(), st.booleans())
def test_generated_responses_agree(data: list[Any], normalise: bool) -> None:
    check(data, fast=None, normalise=normalise)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=30) | st.tuples(st.binary(max_size=30), st.binary(max_size=5))))
def test_random_bytes_agree(data: list[Any]) -> None:
    check(data, fast=None)


# -- the session's fetches -----------------------------------------------------------------


class ChattyClient(FakeClient):
    """Adds what servers also send on a FETCH: news of other messages, repeats."""

    def fetch_lines(self, uids: list[int], items: list[str]) -> list[Any]:
        lines = super().fetch_lines(uids, items)
        return [b"9 (FLAGS (\\Deleted))", *lines, b"3 (UID 30 FLAGS (\\Seen) MODSEQ (5))"]


def test_the_session_takes_the_fast_path(tmp_path: Path) -> None:
    client = ChattyClient({1: raw(1), 2: raw(2, 5000), 3: raw(3)}, uidnext=4)
    s = session(client, tmp_path, stream_threshold_bytes=1000, chunk_bytes=1000)
    before = fallback_count()
    batch = s.fetch_since(None, backfill_since=date(2024, 1, 1), limit=10)
    assert fallback_count() == before
    assert [m.uid for m in batch.messages] == [1, 2, 3]
    assert batch.messages[0].raw == raw(1) and batch.messages[1].blob_ref is not None
    assert batch.messages[0].ref.internal_date == datetime.fromisoformat("2024-01-02T00:00+00:00")
    # Only what was asked for: no message keyed 9 or 30 leaks into the answer.
    assert s._uid_fetch([1], ["FLAGS"]) == {1: {b"SEQ": 1, b"FLAGS": ()}}


class RefusingImap(FakeImap):
    def __init__(self, client: FakeClient, error: BaseException | None) -> None:
        super().__init__(client)
        self.error = error

    def _command_complete(self, name: str, tag: str) -> tuple[str, list[bytes]]:
        if self.error is not None:
            raise self.error
        return "NO", [b"[SERVERBUG] Internal error occurred"]


@pytest.mark.parametrize("error", [None, imaplib.IMAP4.abort("socket error: EOF")])
def test_fetch_errors_are_classified_and_break_the_session(
    tmp_path: Path, error: BaseException | None
) -> None:
    client = FakeClient({1: raw(1)}, uidnext=2)
    client._imap = RefusingImap(client, error)
    s = session(client, tmp_path)
    with pytest.raises(MailboxTransientError) as err:
        s.fetch_since(None, backfill_since=date(2024, 1, 1), limit=10)
    assert err.value.__cause__ is None and "Internal error" not in str(err.value)
    with pytest.raises(MailboxTransientError):
        s.select_inbox()  # broken: no further I/O
    assert client.calls == ["select", "search", "fetch"]
