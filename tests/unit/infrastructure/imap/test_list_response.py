"""LIST and STATUS responses as imaplib hands them over (byte literals), and modified UTF-7
names: what is read, and that whatever a server sends ends as a value or None, never as
an exception."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from imapclient.imap_utf7 import encode as imapclient_encode

from infrastructure.imap import list_response as lr


def entries(data: list[Any]) -> list[lr.ListEntry | None]:
    return [lr.list_entry(t) if t is not None else None for t in lr.responses(data)]


def test_a_plain_list_answer_is_read() -> None:
    got = entries([b'(\\HasNoChildren \\Sent) "/" "Sent Items"', b"() NIL INBOX"])
    assert got == [
        lr.ListEntry(("\\HasNoChildren", "\\Sent"), "/", b"Sent Items"),
        lr.ListEntry((), None, b"INBOX"),
    ]


def test_a_name_in_a_literal_and_extended_items_after_it() -> None:
    data = [(b'(\\Marked) "." {11}', b"Odd (name))"), b' ("CHILDINFO" ("SUBSCRIBED"))']
    assert entries(data) == [lr.ListEntry(("\\Marked",), ".", b"Odd (name))")]


def test_quoted_escapes_are_undone() -> None:
    assert entries([b'() "\\\\" "a\\"b"']) == [lr.ListEntry((), "\\", b'a"b')]


def test_malformed_answers_are_none() -> None:
    bad: list[Any] = [
        b"garbage",
        b'(\\HasNoChildren "/" x',  # unclosed
        b'() "//" x',  # a two-character delimiter
        b'() "/"',  # no name
        b'(("x")) "/" y',  # a list among the attributes
        b'() "/" x trailing',  # extended data that is not a list
        b")(",
        12,
    ]
    for item in bad:
        assert entries([item]) == [None], item
    # the literal is not what was announced
    assert entries([(b'() "/" {9}', b"short"), b""]) == [None]


def test_a_literal_whose_line_never_ends_is_malformed() -> None:
    assert entries([(b'() "/" {3}', b"abc")]) == [None]


def test_nesting_and_token_counts_are_bounded() -> None:
    deep = b'() "/" x ' + b"(" * (lr.MAX_DEPTH + 1) + b")" * (lr.MAX_DEPTH + 1)
    many = b"(" + b" ".join([b"\\A"] * (lr.MAX_TOKENS + 1)) + b') "/" x'
    assert entries([deep, many]) == [None, None]


def test_status_items_are_read_and_bad_values_left_out() -> None:
    tokens = next(
        lr.responses(
            [b"Sent (MESSAGES 3 UIDNEXT 9 UIDVALIDITY 77 MAILBOXID (F1a-b_2) HIGHESTMODSEQ x)"]
        )
    )
    assert tokens is not None
    entry = lr.status_entry(tokens)
    assert entry == lr.StatusEntry(
        b"Sent", {"MESSAGES": 3, "UIDNEXT": 9, "UIDVALIDITY": 77, "MAILBOXID": "F1a-b_2"}
    )


def test_a_mailbox_id_outside_rfc_8474s_alphabet_is_left_out() -> None:
    tokens = next(lr.responses([b"X (MAILBOXID (bad/id) MESSAGES 1)"]))
    assert tokens is not None
    assert lr.status_entry(tokens) == lr.StatusEntry(b"X", {"MESSAGES": 1})


def test_status_numbers_outside_their_range_are_none() -> None:
    assert lr.status_number(2**32, low=1, high=lr.UINT32_MAX) is None
    assert lr.status_number(0, low=1, high=lr.UINT32_MAX) is None
    assert lr.status_number("F1", low=0, high=9) is None
    assert lr.status_number(5, low=1, high=9) == 5


def test_modified_utf7_names_decode() -> None:
    assert lr.decode_name(b"&ANw-n&AO8-") == "\u00dcn\u00ef"
    assert lr.decode_name(b"Tom &- Jerry") == "Tom & Jerry"
    assert lr.decode_name(b"&ZeVnLIqe-") == "\u65e5\u672c\u8a9e"
    assert lr.decode_name(b"ctl&AAE-name") == "ctl\x01name"  # decoded; the caller judges it


def test_names_that_are_not_modified_utf7_are_none() -> None:
    for raw in (
        b"caf\xc3\xa9",  # raw UTF-8
        b"tab\there",  # a control byte on the wire
        b"&ANw",  # an unterminated shift
        b"&A-",  # too short for a UTF-16 unit
        b"&AGE-",  # "a" encoded: printable ASCII must stand for itself
        b"&2D0-",  # half a surrogate pair
        b"&A/w-",  # "/" is not modified base64
    ):
        assert lr.decode_name(raw) is None, raw


@given(st.text(alphabet=st.characters(min_codepoint=0x20, exclude_categories=["Cs"])))
def test_decoding_undoes_imapclients_encoding(name: str) -> None:
    assert lr.decode_name(imapclient_encode(name)) == name


@given(st.lists(st.one_of(st.binary(max_size=40), st.tuples(st.binary(), st.binary())), max_size=8))
def test_any_data_gives_values_or_none(data: list[Any]) -> None:
    for tokens in lr.responses(data):
        if tokens is not None:
            lr.list_entry(tokens)
            lr.status_entry(tokens)
    for item in data:
        if isinstance(item, bytes):
            lr.decode_name(item)
