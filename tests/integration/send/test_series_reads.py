"""What a series reads to find and claim an account's messages, on both backends through
the private Postfix: a page of the read model's due messages is read from the store in
one statement with the account, not one read per message; the account's next series
(after ``SERIES_LIMIT``) pages on from where the last one left its queue, not from its
start, where a lagging read model still offers every message sent; a page read that
another worker's claim made stale costs one refused claim (the rest are read again) and
never sends that message; two workers paging one account send each message once."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from application.mail.outbound import series
from application.mail.outbound.ports import DuePlace
from application.mail.outbound.series import Claim
from application.streams import commit
from tests.integration.send.conftest import MakeSender
from tests.integration.send.test_lanes import _accepted, _lanes, _queued
from tests.integration.send.test_send import _wait_for


def test_a_series_reads_its_due_page_in_one_statement(
    make_sender: MakeSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(series, "PAGE_FRESH", 60.0)  # however slow the machine
    sender = make_sender(provider_limits=_lanes(1))
    account, _bob, ids = _queued(sender, 6)
    store = sender.app.ctx.store
    reads: list[int] = []
    load_many = store.load_many

    def counted(streams: Any) -> Any:
        streams = list(streams)
        reads.append(len(streams))
        return load_many(streams)

    monkeypatch.setattr(store, "load_many", counted)

    assert sender.delivery.run_series(account, lambda: None) == 6

    monkeypatch.undo()
    assert [(sender.outbound(i)["state"], sender.outbound(i)["attempts"]) for i in ids] == [
        ("sent", 1)
    ] * 6
    assert reads == [7], "the six messages' streams and the account's, read together"


def test_the_next_series_pages_on_from_where_the_last_left(
    make_sender: MakeSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = make_sender(provider_limits=_lanes(1))
    account, _bob, ids = _queued(sender, 5)
    outbox = sender.app.ctx.mail.outbox
    assert outbox is not None
    places: list[DuePlace | None] = []
    due_of_account = outbox.due_of_account

    def paged(account_id: str, now: str, limit: int, after: DuePlace | None = None) -> Any:
        places.append(after)
        return due_of_account(account_id, now, limit, after)

    monkeypatch.setattr(outbox, "due_of_account", paged)

    assert sender.delivery.run_series(account, lambda: None, limit=2) == 2
    # The read model is not caught up: it still offers the two sent ones as queued.
    second = len(places)
    assert sender.delivery.run_series(account, lambda: None) == 3

    assert places[0] is None
    start = places[second]
    assert start is not None and start.outbound_id == ids[1], "on from the second message"
    assert [sender.outbound(i)["state"] for i in ids] == ["sent"] * 5


def test_a_place_older_than_its_time_is_not_kept(
    make_sender: MakeSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(series, "PLACE_KEPT", 0.05)
    sender = make_sender(provider_limits=_lanes(1))
    account, _bob, ids = _queued(sender, 3)
    delivery = sender.delivery

    assert delivery.run_series(account, lambda: None, limit=1) == 1
    time.sleep(0.1)

    assert delivery.places.get(account) is None
    assert delivery.run_series(account, lambda: None) == 2
    assert [sender.outbound(i)["state"] for i in ids] == ["sent"] * 3


def test_two_workers_paging_one_account_send_each_message_once(
    make_sender: MakeSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(series, "PAGE_FRESH", 60.0)  # the pages' reads go stale in the race
    one = make_sender("w1", provider_limits=_lanes(2))
    two = make_sender("w2", provider_limits=_lanes(2))
    account, _bob, ids = _queued(one, 24)
    two.app.projections.catch_up()
    made: list[int] = []

    def worker(sender: Any) -> None:
        made.append(sender.delivery.run_series(account, lambda: None))

    threads = [threading.Thread(target=worker, args=(s,)) for s in (one, two)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert len(made) == 2
    records = [one.outbound(i) for i in ids]
    assert [(r["state"], r["attempts"]) for r in records] == [("sent", 1)] * 24
    _wait_for(lambda: all(_accepted(one, i) == 1 for i in ids))
    time.sleep(0.5)  # one accepted twice would show by now
    assert [_accepted(one, i) for i in ids] == [1] * 24


def test_a_page_read_gone_stale_is_read_again_and_the_taken_message_left(
    make_sender: MakeSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(series, "PAGE_FRESH", 60.0)
    sender = make_sender("w1", provider_limits=_lanes(1))
    other = make_sender("w2", provider_limits=_lanes(1))
    account, _bob, ids = _queued(sender, 6)
    store = sender.app.ctx.store
    reads: list[int] = []
    load_many = store.load_many

    def page_then_taken(streams: Any) -> Any:
        streams = list(streams)
        loaded = load_many(streams)
        reads.append(len(streams))
        if len(reads) == 1:  # the page is read: another worker claims its fourth now
            step = other.delivery.prepare(ids[3])
            assert isinstance(step, Claim)
            commit(other.app.ctx.store, step.outbound)
        return loaded

    monkeypatch.setattr(store, "load_many", page_then_taken)

    sender.delivery.run_series(account, lambda: None)

    monkeypatch.undo()
    states = [sender.outbound(i)["state"] for i in ids]
    assert states == ["sent", "sent", "sent", "sending", "sent", "sent"]
    assert sender.outbound(ids[3])["attempts"] == 1, "the other worker's attempt alone"
    assert reads == [7, 2, 2], "after the conflict, the rest read one by one"
    time.sleep(0.5)  # a message accepted would have reached the queue manager by now
    assert _accepted(sender, ids[3]) == 0, "its end of data was withheld here"
