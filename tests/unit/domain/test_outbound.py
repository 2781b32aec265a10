"""The Outbound aggregate's state machine: one attempt at a time, outcomes only from the
attempt's holder, a lapsed attempt decided by the Sent folder, cancel only while waiting."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from domain.outbound import (
    MAX_REPLY_CHARS,
    NotCancelable,
    NotDue,
    Outbound,
    OutboundError,
    OutboundQueued,
    outbound_id,
)

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def queued() -> Outbound:
    stream = outbound_id("acct", "key")
    outbound = Outbound(stream)
    outbound.queue(
        OutboundQueued(
            originator_id=stream,
            originator_version=1,
            timestamp=NOW,
            tenant_id="t",
            account_id="acct",
            queued_by="u",
            digest="d",
            message_id_header="m",
            envelope="e",
            subject="s",
            content="c",
            recipients=1,
            size_bytes=10,
        )
    )
    return outbound


def attempt(outbound: Outbound, holder: str = "w1", at: datetime = NOW) -> None:
    outbound.start_attempt(holder=holder, lease_until=at + timedelta(seconds=60), now=at)


def test_the_same_key_names_the_same_stream() -> None:
    assert outbound_id("a", "k") == outbound_id("a", "k")
    assert outbound_id("a", "k") != outbound_id("b", "k")


def test_queued_sending_sent() -> None:
    outbound = queued()
    attempt(outbound)
    assert (outbound.state, outbound.attempts) == ("sending", 1)
    with pytest.raises(NotDue):
        attempt(outbound, "w2")
    with pytest.raises(OutboundError):
        outbound.sent(holder="w2", reply="250", now=NOW)
    outbound.sent(holder="w1", reply="250 ok\r\n" + "x" * 5000, now=NOW)
    assert str(outbound.state) == "sent"
    assert outbound.reply is not None and len(outbound.reply) == MAX_REPLY_CHARS
    assert "\r" not in outbound.reply


def test_retrying_waits_for_its_next_attempt() -> None:
    outbound = queued()
    attempt(outbound)
    later = NOW + timedelta(seconds=30)
    outbound.retry(holder="w1", reply="451", error_kind="transient", next_attempt_at=later, now=NOW)
    assert not outbound.due(NOW)
    assert outbound.due(later)
    attempt(outbound, "w2", later)
    assert outbound.attempts == 2


def test_a_lapsed_attempt_is_decided_by_the_sent_folder_only() -> None:
    outbound = queued()
    attempt(outbound)
    with pytest.raises(OutboundError):
        outbound.resolve(found=False, reason="x", now=NOW)  # its claim still runs
    after = NOW + timedelta(seconds=61)
    assert outbound.lapsed(after) and not outbound.due(after)
    outbound.resolve(found=False, reason="attempt_lapsed", now=after)
    assert outbound.state == "uncertain"
    assert not outbound.due(after + timedelta(days=1))


def test_the_holder_resolves_an_attempt_without_a_final_answer() -> None:
    outbound = queued()
    attempt(outbound)
    outbound.resolve(found=True, reason="no_final_answer", now=NOW, holder="w1")
    assert outbound.state == "sent"


def test_cancel_only_while_waiting() -> None:
    outbound = queued()
    outbound.cancel(by="u", now=NOW)
    assert outbound.state == "canceled"
    other = queued()
    attempt(other)
    with pytest.raises(NotCancelable):
        other.cancel(by="u", now=NOW)


def test_the_copy_is_recorded_once_after_sent() -> None:
    outbound = queued()
    with pytest.raises(OutboundError):
        outbound.copy_saved(outcome="appended", now=NOW)
    attempt(outbound)
    outbound.sent(holder="w1", reply="250", now=NOW)
    outbound.copy_saved(outcome="appended", now=NOW)
    with pytest.raises(OutboundError):
        outbound.copy_saved(outcome="appended", now=NOW)
    assert [type(e).__name__ for e in outbound.collect()][-1] == "OutboundCopySaved"


def test_replay_gives_the_same_state() -> None:
    outbound = queued()
    attempt(outbound)
    outbound.sent(holder="w1", reply="250", now=NOW)
    again = Outbound.replay(outbound.id, outbound.collect())
    assert (again.state, again.attempts, again.version) == ("sent", 1, 3)
    assert isinstance(again.id, uuid.UUID)


def test_a_failed_copy_is_retried_claimed_and_bounded() -> None:
    outbound = queued()
    attempt(outbound)
    outbound.sent(holder="w1", reply="250", now=NOW)
    later = NOW + timedelta(seconds=30)
    outbound.copy_retrying(error="NO [SERVERBUG]", next_attempt_at=later, now=NOW)
    assert (outbound.copy, outbound.copy_attempts) == ("retrying", 1)
    assert not outbound.copy_due(NOW) and outbound.copy_due(later)
    claim = later + timedelta(seconds=150)
    outbound.copy_retrying(error="claimed", next_attempt_at=claim, now=later)
    assert outbound.copy_attempts == 2, "a claim opens the next try"
    assert not outbound.copy_due(later), "claimed: another worker leaves it"
    outbound.copy_retrying(error="NO again", next_attempt_at=claim, now=later)
    assert outbound.copy_attempts == 2, "its failure belongs to the same try"
    outbound.copy_saved(outcome="appended", now=later)
    assert not outbound.copy_due(claim)
    with pytest.raises(OutboundError):
        outbound.copy_retrying(error="x", next_attempt_at=claim, now=later)
    again = Outbound.replay(outbound.id, outbound.collect())
    assert (again.copy, again.copy_attempts) == ("appended", 2)
