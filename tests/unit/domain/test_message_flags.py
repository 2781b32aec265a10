"""The flag bounds: canonical, bounded, ``\\Recent`` ignored, the rest counted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from domain.message import (
    MessageFlagsChanged,
    MessageIngested,
    MessageState,
    awaiting_body,
    stored_flags,
)
from domain.message_flags import MAX_KEYWORD_BYTES, MAX_KEYWORDS, bounded_flags

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def test_system_flags_are_canonical_sorted_and_deduplicated() -> None:
    got = bounded_flags(["\\SEEN", "\\flagged", "$Label1", "\\Seen", "$Label1"])
    assert got.flags == ("$Label1", "\\Flagged", "\\Seen")
    assert got.dropped == 0
    assert not got.unread
    assert got.flagged


def test_recent_is_ignored_and_counted() -> None:
    got = bounded_flags(["\\Recent", "\\recent"])
    assert got.flags == ()
    assert got.dropped == 2
    assert got.unread
    assert not got.flagged


def test_thousands_of_keywords_keep_fifty() -> None:
    got = bounded_flags(f"k{i:05}" for i in range(5000))
    assert len(got.flags) == MAX_KEYWORDS
    assert got.dropped == 5000 - MAX_KEYWORDS


def test_long_odd_and_unknown_backslash_flags_are_dropped() -> None:
    hostile = [
        "k" * (MAX_KEYWORD_BYTES + 1),
        "x" * 1024,
        "caf\ufffd",
        "a(b",
        "a]b",
        "",
        "\\Unknown",
        "tab\tbed",
    ]
    got = bounded_flags([*hostile, "k" * MAX_KEYWORD_BYTES, "\\Seen"])
    assert got.flags == ("\\Seen", "k" * MAX_KEYWORD_BYTES)
    assert got.dropped == len(hostile)


def test_the_system_flags_are_kept_past_the_keyword_bound() -> None:
    got = bounded_flags([*(f"k{i}" for i in range(200)), "\\Flagged"])
    assert "\\Flagged" in got.flags
    assert len(got.flags) == MAX_KEYWORDS + 1


def _ingested(state: MessageState = "ok", extra: dict[str, Any] | None = None) -> MessageIngested:
    return MessageIngested(
        originator_id=uuid4(),
        originator_version=1,
        timestamp=NOW,
        tenant_id="t",
        account_id="a",
        provider_message_id="p",
        thread_key="k",
        message_id_header="",
        references="",
        sender="",
        to="",
        cc="",
        subject="",
        snippet="",
        received_at="2026-01-01T00:00:00Z",
        body_ref=None,
        size_bytes=1,
        folder="INBOX",
        state=state,
        defects=[],
        extra=extra or {},
    )


def test_a_stream_holds_its_arrival_flags_then_its_latest_change() -> None:
    first = _ingested(extra={"flags": ["\\Seen"]})
    assert stored_flags([first]) == ("\\Seen",)
    changed = MessageFlagsChanged(
        originator_id=first.originator_id,
        originator_version=2,
        timestamp=NOW,
        tenant_id="t",
        account_id="a",
        flags=["\\Flagged"],
        unread=True,
        flagged=True,
    )
    assert stored_flags([first, changed]) == ("\\Flagged",)
    assert stored_flags([_ingested()]) == ()  # recorded before flags were kept
    assert stored_flags([]) is None


def test_only_a_deferred_stream_of_one_event_awaits_its_body() -> None:
    assert awaiting_body([_ingested("deferred")])
    assert not awaiting_body([_ingested("ok")])
    assert not awaiting_body([])
