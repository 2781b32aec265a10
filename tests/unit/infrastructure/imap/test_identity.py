from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from infrastructure.imap.identity import (
    fingerprint,
    header_values,
    message_ref,
    provider_message_id,
    refusal,
    valid_id,
)

HDR = b"BODY[HEADER.FIELDS (MESSAGE-ID DATE)]"


def test_header_values_reads_message_id_and_date_case_insensitively() -> None:
    block = b"message-ID: <a@b>\r\nDATE: Mon, 1 Jan 2024 00:00:00 +0000\r\n\r\n"
    assert header_values(block) == (b"<a@b>", b"Mon, 1 Jan 2024 00:00:00 +0000")


def test_header_values_unfolds_and_collapses_whitespace() -> None:
    block = b"Date: Mon, 1 Jan 2024\r\n   00:00:00   +0000\r\nMessage-ID:\r\n <x@y>\r\n\r\n"
    assert header_values(block) == (b"<x@y>", b"Mon, 1 Jan 2024 00:00:00 +0000")


def test_header_values_takes_the_first_of_repeated_fields_and_tolerates_missing() -> None:
    assert header_values(b"Message-ID: <1@x>\r\nMessage-ID: <2@x>\r\n\r\n") == (b"<1@x>", None)
    assert header_values(b"") == (None, None)
    assert header_values(b"garbage without colon\r\n\xff\xfe\r\n") == (None, None)


def test_fingerprint_is_stable_and_sensitive_to_each_part() -> None:
    base = fingerprint(b"<a@b>", b"Mon, 1 Jan 2024 00:00:00 +0000", 120)
    assert base == fingerprint(b"<a@b>", b"Mon, 1 Jan 2024 00:00:00 +0000", 120)
    assert base.startswith("fp:") and len(base) == 3 + 64
    assert base != fingerprint(b"<a@c>", b"Mon, 1 Jan 2024 00:00:00 +0000", 120)
    assert base != fingerprint(b"<a@b>", b"Tue, 2 Jan 2024 00:00:00 +0000", 120)
    assert base != fingerprint(b"<a@b>", b"Mon, 1 Jan 2024 00:00:00 +0000", 121)


def test_fingerprint_parts_cannot_run_into_each_other() -> None:
    assert fingerprint(b"ab", b"c", 1) != fingerprint(b"a", b"bc", 1)
    assert fingerprint(None, None, 0) == fingerprint(b"", b"", 0)


def test_provider_id_prefers_emailid_then_gmail_then_fingerprint() -> None:
    item = {
        b"EMAILID": (b"M6d99ac3275bb4e",),
        b"X-GM-MSGID": 1278455344230334865,
        HDR: b"Message-ID: <a@b>\r\n\r\n",
    }
    assert provider_message_id(item, 10) == "emailid:M6d99ac3275bb4e"
    del item[b"EMAILID"]
    assert provider_message_id(item, 10) == "gm:1278455344230334865"
    del item[b"X-GM-MSGID"]
    assert provider_message_id(item, 10) == fingerprint(b"<a@b>", None, 10)


def test_provider_id_does_not_depend_on_the_uid() -> None:
    item = {HDR: b"Message-ID: <a@b>\r\nDate: x\r\n\r\n", b"RFC822.SIZE": 42}
    assert message_ref(1, item).provider_message_id == message_ref(999, item).provider_message_id


def test_message_ref_types_the_fetch_items() -> None:
    tz = timezone(timedelta(hours=-7))
    item = {
        b"RFC822.SIZE": 2048,
        b"INTERNALDATE": datetime(2024, 1, 1, 2, 0, tzinfo=tz),
        b"FLAGS": (b"\\Seen", b"$Forwarded"),
        HDR: b"Message-ID: <a@b>\r\n\r\n",
        b"SEQ": 3,
    }
    ref = message_ref(7, item)
    assert ref.uid == 7
    assert ref.size == 2048
    assert ref.flags == ("\\Seen", "$Forwarded")
    assert ref.internal_date == datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
    assert ref.internal_date is not None and ref.internal_date.tzinfo is UTC


def test_message_ref_tolerates_missing_items() -> None:
    ref = message_ref(5, {})
    assert (ref.size, ref.internal_date, ref.flags) == (0, None, ())
    assert ref.provider_message_id == fingerprint(None, None, 0)


def _at(year: int, hours: int = 0, minutes: int = 0) -> datetime:
    return datetime(year, 6, 1, tzinfo=timezone(timedelta(hours=hours, minutes=minutes)))


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({b"RFC822.SIZE": 2**63}, "size_out_of_range"),
        ({b"RFC822.SIZE": 2**53 + 1}, "size_out_of_range"),
        ({b"RFC822.SIZE": -1}, "size_out_of_range"),
        ({b"RFC822.SIZE": b"12"}, "size_not_a_number"),
        ({b"RFC822.SIZE": True}, "size_not_a_number"),
        ({b"INTERNALDATE": b"01-Jan-2024"}, "internaldate_unreadable"),
        ({b"INTERNALDATE": _at(9999, -23, -59)}, "internaldate_offset_impossible"),
        ({b"INTERNALDATE": _at(2024, 14, 1)}, "internaldate_offset_impossible"),
        ({b"INTERNALDATE": _at(9999)}, "internaldate_out_of_range"),
        ({b"INTERNALDATE": _at(1969, 5)}, "internaldate_out_of_range"),
        ({b"INTERNALDATE": _at(2201)}, "internaldate_out_of_range"),
        ({b"RFC822.SIZE": 2**53, b"INTERNALDATE": _at(2200, -14)}, None),
        ({b"RFC822.SIZE": 0, b"INTERNALDATE": _at(1970, 14)}, None),
        ({b"INTERNALDATE": None}, None),
        ({}, None),
    ],
)
def test_refusal_names_the_value_out_of_range(item: dict[bytes, Any], reason: str | None) -> None:
    assert refusal(item) == reason


def test_message_ref_never_carries_a_date_out_of_range() -> None:
    ref = message_ref(1, {b"RFC822.SIZE": 5, b"INTERNALDATE": _at(9999, -23, -59)})
    assert ref.internal_date is None and ref.size == 5


@pytest.mark.parametrize(
    ("value", "valid"),
    [(1, True), (2**32 - 1, True), (0, False), (2**32, False), (-1, False), (b"1", False)],
)
def test_valid_id_is_rfc3501s_nz_number(value: object, valid: bool) -> None:
    assert valid_id(value) is valid
