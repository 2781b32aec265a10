"""The feed items of a deferred message's second event and of a restored message: their
public shapes, their ordering key (the account) and which fields stay sealed until
served."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

from application.feed.items import TYPES, entry_of, item_id
from domain.message import MessageBodyFetched, MessageBodyVanished, MessageRestored

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def test_a_fetched_body_is_a_message_body_fetched_item_with_its_snippet_sealed() -> None:
    event = MessageBodyFetched(
        originator_id=uuid4(),
        originator_version=2,
        timestamp=NOW,
        tenant_id="t1",
        account_id="a1",
        snippet="sealed-token",
        body_ref="ref",
        size_bytes=1234,
        state="ok",
        defects=[],
    )
    entry = entry_of(event)
    assert entry is not None
    assert (entry.type, entry.tenant_id, entry.account_id) == ("message.body_fetched", "t1", "a1")
    assert entry.data == {
        "messageId": str(event.originator_id),
        "accountId": "a1",
        "snippet": "sealed-token",
        "sizeBytes": 1234,
        "state": "ok",
    }
    assert entry.sealed == ("snippet",)
    assert entry.item_id == item_id(event)  # version 2: never the received item's id
    assert "bodyRef" not in entry.data  # internal


def test_a_vanished_body_is_a_message_body_vanished_item() -> None:
    event = MessageBodyVanished(
        originator_id=uuid4(),
        originator_version=2,
        timestamp=NOW,
        tenant_id="t1",
        account_id="a1",
        reason="expunged",
    )
    entry = entry_of(event)
    assert entry is not None
    assert entry.type == "message.body_vanished" and entry.account_id == "a1"
    assert entry.data == {
        "messageId": str(event.originator_id),
        "accountId": "a1",
        "state": "vanished",
        "reason": "expunged",
    }
    assert entry.sealed == ()
    assert {"message.body_fetched", "message.body_vanished"} <= set(TYPES)


def test_a_restored_message_is_a_message_restored_item() -> None:
    event = MessageRestored(
        originator_id=uuid4(),
        originator_version=4,
        timestamp=NOW,
        tenant_id="t1",
        account_id="a1",
        folders=["Archive", "INBOX"],
        state="too_large",
    )
    entry = entry_of(event)
    assert entry is not None
    assert (entry.type, entry.account_id, entry.sealed) == ("message.restored", "a1", ())
    assert entry.data == {
        "messageId": str(event.originator_id),
        "accountId": "a1",
        "folders": ["Archive", "INBOX"],
        "state": "too_large",
    }
    assert "message.restored" in TYPES
