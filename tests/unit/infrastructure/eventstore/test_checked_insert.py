"""Which callers of a batch are stale: a checked stream's head moved, or another caller
of the same batch writes it."""

from __future__ import annotations

from uuid import UUID, uuid4

from eventsourcing.persistence import StoredEvent

from infrastructure.eventstore.checked_insert import PendingAppend, stale_appends


def stored(stream: UUID, version: int = 1) -> StoredEvent:
    return StoredEvent(stream, version, "t", b"{}")


def test_a_caller_whose_checked_heads_hold_is_not_stale() -> None:
    a, b = uuid4(), uuid4()
    appends = [PendingAppend([stored(uuid4())], {a: 3, b: 0}), PendingAppend([stored(uuid4())])]
    assert stale_appends(appends, {a: 3}) == [False, False]


def test_a_moved_or_missing_head_makes_only_its_caller_stale() -> None:
    a = uuid4()
    appends = [
        PendingAppend([stored(uuid4())], {a: 2}),
        PendingAppend([stored(uuid4())], {a: 3}),
        PendingAppend([stored(uuid4())], {uuid4(): 1}),  # expects an event that is not there
    ]
    assert stale_appends(appends, {a: 3}) == [True, False, True]


def test_another_caller_writing_a_checked_stream_makes_the_checker_stale() -> None:
    a = uuid4()
    appends = [
        PendingAppend([stored(uuid4())], {a: 0}),
        PendingAppend([stored(a, 1)]),
        PendingAppend([stored(a, 2)], {a: 1}),  # its own write of a checked stream is fine
    ]
    assert stale_appends(appends, None) == [True, False, True]
    assert stale_appends(appends[2:], {a: 1}) == [False]  # alone: only the head counts


def test_a_stream_taken_as_new_is_stale_once_it_holds_an_event() -> None:
    a = uuid4()
    taken_as_new = [PendingAppend([stored(a, 1)], {a: 0})]
    assert stale_appends(taken_as_new, {}) == [False]
    assert stale_appends(taken_as_new, {a: 1}) == [True]
