import base64
import email.policy
import io
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from email.parser import BytesParser

from hypothesis import given, settings
from hypothesis import strategies as st

from application.mail.parsing import Address, ParsedMessage
from infrastructure.mime.authresults import parse_authentication_results
from infrastructure.mime.reader import parse_message, parse_message_file

SIMPLE = (
    b"Return-Path: <bounce@example.org>\r\n"
    b"Message-ID: <abc.123@mail.example.org>\r\n"
    b"In-Reply-To: <parent@example.org>\r\n"
    b"References: <root@example.org>\r\n <parent@example.org>\r\n"
    b'From: "Ada Lovelace" <ada@example.org>\r\n'
    b"To: bob@example.com, =?utf-8?q?Zo=C3=AB?= <zoe@example.com>\r\n"
    b"Cc: Carol <carol@example.com>\r\n"
    b"Subject: =?iso-8859-1?q?Caf=E9?= menu\r\n"
    b"Date: Tue, 02 Jan 2024 10:30:00 +0100\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"\r\n"
    b"Hello   there,\r\n\r\nthe caf\xc3\xa9 opens at nine.\r\n"
)


def test_reads_the_ingestion_fields() -> None:
    m = parse_message(SIMPLE)
    assert m.message_id == "<abc.123@mail.example.org>"
    assert m.in_reply_to == "<parent@example.org>"
    assert m.references == ("<root@example.org>", "<parent@example.org>")
    assert m.sender == (Address("Ada Lovelace", "ada@example.org"),)
    assert m.to == (Address("", "bob@example.com"), Address("Zoë", "zoe@example.com"))
    assert m.cc == (Address("Carol", "carol@example.com"),)
    assert m.subject == "Café menu"
    assert m.date == datetime(2024, 1, 2, 10, 30, tzinfo=timezone(timedelta(hours=1)))
    assert m.snippet == "Hello there, the café opens at nine."
    assert not m.malformed and m.defects == ()


def test_snippet_is_cut_to_the_limit() -> None:
    raw = b"From: a@b\r\nDate: Tue, 02 Jan 2024 10:30:00 +0000\r\n\r\n" + b"word " * 500
    m = parse_message(raw)
    assert len(m.snippet) <= 200 and m.snippet.startswith("word word")
    assert len(parse_message(raw, snippet_chars=20).snippet) <= 20


def _multipart(parts: list[bytes], subtype: bytes = b"alternative") -> bytes:
    body = b"".join(b"--BOUNDARY\r\n" + p + b"\r\n" for p in parts) + b"--BOUNDARY--\r\n"
    return (
        b"From: a@example.org\r\nDate: Tue, 02 Jan 2024 10:30:00 +0000\r\n"
        b"MIME-Version: 1.0\r\nContent-Type: multipart/" + subtype + b'; boundary="BOUNDARY"\r\n'
        b"\r\npreamble\r\n" + body
    )


HTML_PART = (
    b"Content-Type: text/html; charset=utf-8\r\n\r\n"
    b"<html><head><style>p{color:red}</style><title>T</title></head>"
    b"<body><p>Hi&nbsp;<b>there</b> &amp; welcome</p><script>alert(1)</script></body></html>"
)
PLAIN_PART = b"Content-Type: text/plain; charset=utf-8\r\n\r\nPlain version"


def test_prefers_text_plain_in_alternatives() -> None:
    assert parse_message(_multipart([HTML_PART, PLAIN_PART])).snippet == "Plain version"


def test_strips_html_when_there_is_no_plain_part() -> None:
    m = parse_message(_multipart([HTML_PART]))
    assert m.snippet == "Hi there & welcome"
    assert not m.malformed


def test_skips_attachments_and_nested_parts() -> None:
    attachment = (
        b"Content-Type: text/plain\r\nContent-Disposition: attachment; filename=a.txt\r\n\r\n"
        b"attached text"
    )
    inner = (
        b'Content-Type: multipart/alternative; boundary="INNER"\r\n\r\n'
        b"--INNER\r\n" + PLAIN_PART + b"\r\n--INNER--"
    )
    m = parse_message(_multipart([attachment, inner], b"mixed"))
    assert m.snippet == "Plain version"
    assert not m.malformed


def test_decodes_base64_and_quoted_printable_with_charsets() -> None:
    b64 = base64.b64encode("Grüße aus Köln".encode("iso-8859-1"))
    part = (
        b"Content-Type: text/plain; charset=iso-8859-1\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\n" + b64
    )
    assert parse_message(_multipart([part])).snippet == "Grüße aus Köln"
    qp = (
        b"Content-Type: text/plain; charset=windows-1252\r\n"
        b"Content-Transfer-Encoding: quoted-printable\r\n\r\n"
        b"=93quoted=94 text that is soft=\r\n broken"
    )
    assert parse_message(_multipart([qp])).snippet == "\u201cquoted\u201d text that is soft broken"


def test_utf8_headers_are_fine_but_other_8bit_headers_are_a_defect() -> None:
    utf8 = b"From: J\xc3\xbcrgen <j@example.org>\r\nDate: Tue, 02 Jan 2024 10:30:00 +0000\r\n"
    m = parse_message(utf8 + b"Subject: \xc3\xbcber\r\n\r\nx")
    assert (m.subject, m.sender[0].name, m.malformed) == ("über", "Jürgen", False)
    m = parse_message(utf8 + b"Subject: \xfcber caf\xe9\r\n\r\nx")
    assert m.subject == "über café"
    assert m.malformed and "NonUtf8HeaderBytes" in m.defects


def test_auth_results_are_collected_in_header_order() -> None:
    raw = (
        b"Authentication-Results: mx.example.com; dmarc=fail (p=reject) header.from=evil.test\r\n"
        b"Authentication-Results: other.example; dmarc=pass\r\n"
        b"From: a@evil.test\r\nDate: Tue, 02 Jan 2024 10:30:00 +0000\r\n\r\nx"
    )
    m = parse_message(raw)
    parsed = [parse_authentication_results(v) for v in m.authentication_results]
    assert [(a.authserv_id, a.result("dmarc")) for a in parsed if a is not None] == [
        ("mx.example.com", "fail"),
        ("other.example", "pass"),
    ]


# -- malformed corpus ---------------------------------------------------------------------------

DATE = b"Date: Tue, 02 Jan 2024 10:30:00 +0000\r\n"
MALFORMED: dict[str, bytes] = {
    "empty": b"",
    "garbage": bytes(range(256)) * 4,
    "nul_and_binary": b"\x00\x01\x02From: \x00\xff\r\n\r\n\x00",
    "no_separator": b"From: a@b\r\n" + DATE + b"this line is no header\r\nbody",
    "broken_boundary": (
        b"From: a@b\r\n" + DATE + b'Content-Type: multipart/mixed; boundary="XYZ"\r\n\r\n'
        b"--WRONG\r\nContent-Type: text/plain\r\n\r\nlost text\r\n--WRONG--\r\n"
    ),
    "unclosed_boundary": (
        b"From: a@b\r\n" + DATE + b'Content-Type: multipart/mixed; boundary="XYZ"\r\n\r\n'
        b"--XYZ\r\nContent-Type: text/plain\r\n\r\nkept text\r\n"
    ),
    "unknown_charset": (
        b"From: a@b\r\n" + DATE + b"Content-Type: text/plain; charset=x-klingon-8\r\n\r\n"
        b"caf\xc3\xa9 text"
    ),
    "raw_8bit_headers": b"From: \xe9\xe8 <a@b>\r\n" + DATE + b"Subject: \xff\xfe\r\n\r\nbody",
    "bad_base64": (
        b"From: a@b\r\n" + DATE + b"Content-Type: text/plain\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\nSGVsbG8gd29ybGQ!!!*\r\n"
    ),
    "bad_encoded_word": b"From: a@b\r\n"
    + DATE
    + b"Subject: =?utf-8?b?Q?= =?x-bogus?q?abc?=\r\n\r\nx",
    "bad_date": b"From: a@b\r\nDate: the day after tomorrow\r\n\r\nx",
    "no_from": DATE + b"Subject: hi\r\n\r\nx",
    "undeclared_8bit_body": b"From: a@b\r\n" + DATE + b"\r\ncaf\xe9 ol\xe9",
    "bogus_addresses": b"From: <<<@@@>>>, ;;;\r\n" + DATE + b"\r\nx",
    "huge_header_line": b"From: a@b\r\n" + DATE + b"X-Long: " + b"a" * 200_000 + b"\r\n\r\nx",
    "deep_nesting": (
        b"From: a@b\r\n"
        + DATE
        + b"".join(
            b'Content-Type: multipart/mixed; boundary="b%d"\r\n\r\n--b%d\r\n' % (i, i)
            for i in range(60)
        )
        + b"Content-Type: text/plain\r\n\r\ndeep"
    ),
}


def test_malformed_corpus_never_raises_and_is_flagged() -> None:
    for name, raw in MALFORMED.items():
        m = parse_message(raw)
        assert isinstance(m, ParsedMessage), name
        if name not in ("huge_header_line", "deep_nesting"):
            assert m.malformed, name
            assert m.defects, name


def test_malformed_messages_keep_what_could_be_read() -> None:
    m = parse_message(MALFORMED["unclosed_boundary"])
    assert m.snippet == "kept text" and m.malformed
    m = parse_message(MALFORMED["unknown_charset"])
    assert m.snippet == "café text" and "UnknownCharset" in m.defects
    m = parse_message(MALFORMED["bad_base64"])
    assert m.snippet.startswith("Hello world") and m.malformed
    m = parse_message(MALFORMED["bad_date"])
    assert m.date is None and "UnparseableDate" in m.defects
    assert m.sender == (Address("", "a@b"),)
    m = parse_message(MALFORMED["undeclared_8bit_body"])
    assert m.snippet == "café olé"
    m = parse_message(MALFORMED["bad_encoded_word"])
    assert m.subject == "=?utf-8?b?Q?= =?x-bogus?q?abc?=" and "InvalidEncodedWord" in m.defects


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_raise(raw: bytes) -> None:
    parse_message(raw)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([*MALFORMED.values(), SIMPLE]), max_size=3), st.binary())
def test_spliced_corpus_never_raises(parts: list[bytes], tail: bytes) -> None:
    parse_message(b"".join(parts) + tail)


# -- parsing from a file (big messages) ---------------------------------------------------------


def _big_message(attachment_bytes: int) -> bytes:
    blob = base64.encodebytes(b"\x00" * attachment_bytes)
    return _multipart(
        [
            PLAIN_PART,
            b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n"
            b"Content-Disposition: attachment; filename=big.bin\r\n\r\n" + blob,
        ],
        b"mixed",
    )


class CountingFile(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.bytes_read += len(data)
        return data


def test_file_parse_reads_only_the_head_and_reports_no_cut_defects() -> None:
    raw = _big_message(3 * 1024 * 1024)
    f = CountingFile(raw)
    m = parse_message_file(f, head_bytes=64 * 1024)
    assert f.bytes_read <= 64 * 1024 + 1
    assert m.snippet == "Plain version"
    assert m.sender == (Address("", "a@example.org"),)
    assert not m.malformed, m.defects


def test_file_parse_of_a_small_message_equals_bytes_parse() -> None:
    assert parse_message_file(io.BytesIO(SIMPLE)) == parse_message(SIMPLE)


def test_file_parse_flags_headers_longer_than_the_head() -> None:
    raw = b"From: a@b\r\n" + DATE + (b"X-Pad: " + b"p" * 990 + b"\r\n") * 100 + b"\r\nbody"
    m = parse_message_file(io.BytesIO(raw), head_bytes=10_000)
    assert "HeadersTooLong" in m.defects
    assert m.sender == (Address("", "a@b"),)


def test_naive_dates_are_utc() -> None:
    m = parse_message(b"From: a@b\r\nDate: Tue, 02 Jan 2024 10:30:00 -0000\r\n\r\nx")
    assert m.date == datetime(2024, 1, 2, 10, 30, tzinfo=UTC)


def test_stays_well_ahead_of_the_modern_email_policy() -> None:
    """Guards the compat32 choice, relative to the slow path so load does not matter."""
    raw = _multipart([PLAIN_PART, HTML_PART])

    def rate(parse: Callable[[bytes], object]) -> float:
        start = time.perf_counter()
        for _ in range(200):
            parse(raw)
        return 200 / (time.perf_counter() - start)

    modern = BytesParser(policy=email.policy.default)
    assert rate(parse_message) > 2 * rate(modern.parsebytes)
