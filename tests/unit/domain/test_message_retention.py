"""A message's life under mail retention, given events / when command / then events:
due by received_at, each erasure and expiry once, an expiry taking the body with it,
deferred messages waiting for their body, and no body nothing to erase."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import pytest

from domain.message import MessageBodyFetched, MessageBodyVanished, MessageIngested
from domain.message_retention import MessageBodyErased, MessageExpired, MessageLife
from tests.unit.domain.scenario import NOW, given, when

RECEIVED = "2024-01-10T08:00:00Z"
AT, BEFORE = "2024-01-10T08:00:00Z", "2024-01-10T07:59:59Z"


def ingested(stream: UUID, state: str = "ok", body_ref: str | None = "ref-1") -> MessageIngested:
    return MessageIngested(
        originator_id=stream,
        originator_version=1,
        timestamp=NOW,
        tenant_id="t1",
        account_id="a1",
        provider_message_id="p1",
        thread_key="k",
        message_id_header="",
        references="[]",
        sender="[]",
        to="[]",
        cc="[]",
        subject="",
        snippet="",
        received_at=RECEIVED,
        body_ref=body_ref,
        size_bytes=10,
        folder="INBOX",
        state=state,  # type: ignore[arg-type]
        defects=[],
        extra={},
    )


def erase(cutoff: str) -> Any:
    return lambda life: life.erase_body(cutoff=cutoff, keep_for="30d", now=NOW)


def expire(cutoff: str) -> Any:
    return lambda life: life.expire(cutoff=cutoff, keep_for="60d", now=NOW)


def test_a_body_is_erased_once_from_its_cutoff_on() -> None:
    stream = uuid4()
    life = given(MessageLife, stream, [ingested(stream)])
    assert when(life, erase(BEFORE)) == []
    [erased] = when(life, erase(AT))
    assert isinstance(erased, MessageBodyErased) and erased.originator_version == 2
    assert (erased.body_ref, erased.keep_for, erased.tenant_id) == ("ref-1", "30d", "t1")
    assert when(life, erase(AT)) == []
    again = given(MessageLife, stream, [ingested(stream), erased])
    assert when(again, erase(AT)) == []


def test_an_expiry_takes_the_body_with_it_and_happens_once() -> None:
    stream = uuid4()
    life = given(MessageLife, stream, [ingested(stream)])
    assert when(life, expire(BEFORE)) == []
    [expired] = when(life, expire(AT))
    assert isinstance(expired, MessageExpired) and expired.body_ref == "ref-1"
    assert when(life, expire(AT)) == [] and when(life, erase(AT)) == []


def test_an_expiry_after_an_erasure_names_no_blob() -> None:
    stream = uuid4()
    life = given(MessageLife, stream, [ingested(stream)])
    when(life, erase(AT))
    [expired] = when(life, expire(AT))
    assert isinstance(expired, MessageExpired) and expired.body_ref is None
    assert expired.originator_version == 3


def test_a_deferred_message_waits_for_its_body() -> None:
    stream = uuid4()
    deferred = ingested(stream, state="deferred", body_ref=None)
    life = given(MessageLife, stream, [deferred])
    assert when(life, erase(AT)) == [] and when(life, expire(AT)) == []
    fetched = MessageBodyFetched(
        originator_id=stream,
        originator_version=2,
        timestamp=NOW,
        tenant_id="t1",
        account_id="a1",
        snippet="",
        body_ref="ref-2",
        size_bytes=10,
        state="ok",
        defects=[],
    )
    life = given(MessageLife, stream, [deferred, fetched])
    [erased] = when(life, erase(AT))
    assert isinstance(erased, MessageBodyErased) and erased.body_ref == "ref-2"
    assert erased.originator_version == 3


@pytest.mark.parametrize("state", ["too_large", "vanished"])
def test_a_message_without_a_body_has_nothing_to_erase_but_expires(state: str) -> None:
    stream = uuid4()
    events: list[Any] = [ingested(stream, state="deferred", body_ref=None)]
    if state == "vanished":
        events.append(
            MessageBodyVanished(
                originator_id=stream,
                originator_version=2,
                timestamp=NOW,
                tenant_id="t1",
                account_id="a1",
                reason="expunged",
            )
        )
    else:
        events[0] = ingested(stream, state=state, body_ref=None)
    life = given(MessageLife, stream, events)
    assert when(life, erase(AT)) == []
    [expired] = when(life, expire(AT))
    assert isinstance(expired, MessageExpired) and expired.body_ref is None


def test_an_empty_stream_is_never_due() -> None:
    life = given(MessageLife, uuid4())
    assert when(life, erase("9999")) == [] and when(life, expire("9999")) == []
