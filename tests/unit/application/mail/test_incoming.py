"""The ingestion service's range rules, pure: what a server or caller sends is brought into
the ranges an event and the read model hold, and a cursor out of range refuses its page."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from application.mail.incoming import (
    MAX_ITEMS,
    MAX_SIZE_BYTES,
    MAX_TEXT_CHARS,
    IncomingMessage,
    PageRefused,
    check_cursor,
    in_range,
)
from application.mail.parsing import Address, in_date_range
from application.mail.ports import MailboxCursor

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WHEN = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)


BASE = IncomingMessage(provider_message_id="p1", received_at=WHEN, size_bytes=10)


def message(**fields: Any) -> IncomingMessage:
    return replace(BASE, **fields)


def test_an_ordinary_message_is_unchanged() -> None:
    m = message(subject="Grüße", sender=(Address("Zoë", "z@example.org"),))
    assert in_range(m, NOW) == m


@pytest.mark.parametrize("size", [-1, MAX_SIZE_BYTES + 1, 2**63, 2**64 + 5])
def test_a_size_out_of_range_is_a_defect(size: int) -> None:
    m = in_range(message(size_bytes=size), NOW)
    assert (m.size_bytes, m.state) == (0, "malformed") and "SizeOutOfRange" in m.defects


@pytest.mark.parametrize(
    "when",
    [
        datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59))),
        datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
        datetime(2201, 1, 1, tzinfo=UTC),
        datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=15))),
    ],
)
def test_a_date_out_of_range_is_a_defect(when: datetime) -> None:
    assert not in_date_range(when)
    m = in_range(message(received_at=when), NOW)
    assert (m.received_at, m.state) == (NOW, "malformed") and "DateOutOfRange" in m.defects


def test_text_loses_lone_surrogates_and_nul_and_is_capped() -> None:
    m = in_range(
        message(
            provider_message_id="p\ud800",
            subject="a\x00b" + "x" * MAX_TEXT_CHARS,
            to=tuple(Address("\udfff", f"{i}@x") for i in range(MAX_ITEMS + 1)),
            references=("\ud83d",),
        ),
        NOW,
    )
    assert m.provider_message_id == "p\ufffd" and len(m.subject) == MAX_TEXT_CHARS
    assert m.subject.startswith("a\ufffdb") and len(m.to) == MAX_ITEMS
    assert m.to[0].name == "\ufffd" and m.references == ("\ufffd",)
    assert m.state == "malformed"
    for text in (m.provider_message_id, m.subject, *m.references, *m.defects):
        text.encode("utf-8")


def test_a_recorded_state_other_than_ok_is_kept() -> None:
    m = in_range(message(size_bytes=-5, state="too_large"), NOW)
    assert m.state == "too_large" and "SizeOutOfRange" in m.defects


@pytest.mark.parametrize(
    "cursor",
    [
        MailboxCursor(uidvalidity=0, last_uid=1),
        MailboxCursor(uidvalidity=2**32, last_uid=1),
        MailboxCursor(uidvalidity=2**63, last_uid=1),
        MailboxCursor(uidvalidity=1, last_uid=-1),
        MailboxCursor(uidvalidity=1, last_uid=2**32),
        MailboxCursor(uidvalidity=1, last_uid=1, highestmodseq=2**63),
        MailboxCursor(uidvalidity=1, last_uid=1, backfill_until=2**40),
    ],
)
def test_a_cursor_out_of_range_refuses_its_page(cursor: MailboxCursor) -> None:
    with pytest.raises(PageRefused):
        check_cursor(cursor)


def test_cursors_at_the_edges_are_kept() -> None:
    check_cursor(MailboxCursor(uidvalidity=2**32 - 1, last_uid=2**32 - 1, highestmodseq=2**63 - 1))
    check_cursor(MailboxCursor(uidvalidity=1, last_uid=0, backfill_until=0))
