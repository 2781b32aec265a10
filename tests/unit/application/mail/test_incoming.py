"""The ingestion service's range rules, pure: what a server or caller sends is brought into
the ranges an event and the read model hold, and a cursor out of range refuses its page."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from application.mail.incoming import (
    MAX_ITEMS,
    MAX_SIZE_BYTES,
    MAX_TEXT_CHARS,
    IncomingMessage,
    PageRefused,
    check_cursor,
    in_range,
)
from application.mail.message_event import utc_iso
from application.mail.parsing import Address, in_date_range
from application.mail.ports import MailboxCursor
from domain.all_events import EVENT_CLASSES
from domain.message import MessageIngested
from infrastructure.eventstore.codec import EventCodec

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


# -- whatever arrives, the event it makes survives the codec round trip ------------------

any_text = st.text(st.characters(blacklist_categories=()), max_size=40)  # surrogates too
any_int = st.integers(min_value=-(2**70), max_value=2**70)
offsets = st.timedeltas(min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23))
any_date = st.builds(
    lambda moment, offset: moment.replace(tzinfo=timezone(offset)),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    offsets,
)
addresses = st.lists(st.builds(Address, any_text, any_text), max_size=3).map(tuple)


@settings(max_examples=300, deadline=None)
@given(
    provider_id=any_text,
    size=any_int,
    received=any_date,
    subject=any_text,
    sender=addresses,
    references=st.lists(any_text, max_size=3).map(tuple),
)
def test_the_event_of_any_message_survives_the_codec(
    provider_id: str,
    size: int,
    received: datetime,
    subject: str,
    sender: tuple[Address, ...],
    references: tuple[str, ...],
) -> None:
    m = in_range(
        message(
            provider_message_id=provider_id,
            size_bytes=size,
            received_at=received,
            subject=subject,
            sender=sender,
            references=references,
        ),
        NOW,
    )
    event = MessageIngested(
        originator_id=uuid4(),
        originator_version=1,
        timestamp=NOW,
        tenant_id="t1",
        account_id="a1",
        provider_message_id=m.provider_message_id,
        thread_key="k",
        message_id_header=m.message_id_header or "",
        references=json.dumps(list(m.references), ensure_ascii=False),
        sender=json.dumps([[a.name, a.address] for a in m.sender], ensure_ascii=False),
        to="[]",
        cc="[]",
        subject=m.subject,
        snippet=m.snippet,
        received_at=utc_iso(m.received_at),
        body_ref=None,
        size_bytes=m.size_bytes,
        folder=m.folder,
        state=m.state,
        defects=list(m.defects),
        extra={},
    )
    codec = EventCodec(EVENT_CLASSES)
    stored = codec.encode(event)
    decoded = codec.decode(stored.originator_id, 1, stored.topic, stored.state)
    assert decoded == event
    assert 0 <= event.size_bytes <= MAX_SIZE_BYTES
    assert "1970-01-01T00:00:00Z" <= event.received_at <= "2200-12-31T23:59:59Z"
