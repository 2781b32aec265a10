"""A series overlaps the write of a message's claim with that message's SMTP exchange, on
both backends with the real Postfix: the next message's header and body reach Postfix
while its ``sending`` is being written, and its end of data only after the write, so
Postfix cannot accept it before the claim is durable; when another worker took the
message meanwhile, the end is never sent, Postfix never accepts that transaction, and
the other worker's send is the only one; a worker killed while the end waits leaves
nothing accepted, the message still queued, and it is sent later once; the lane makes
the write itself, in its own thread."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any

import pytest

from application.mail.outbound.series import Claim
from application.streams import commit
from tests.integration.mail.conftest import MASTER_KEY
from tests.integration.send.conftest import MakeSender, Sender
from tests.integration.send.test_crash import ROOT
from tests.integration.send.test_kept_connection import PROVIDER_SAVES, _inbox
from tests.integration.send.test_send import _address, _wait_for

HELD = 0.5  # seconds a claim's write is held after the message's header reached Postfix
# Postfix's smtpd hands a message to cleanup (which logs its Message-ID) in buffers of
# a few KiB: a body larger than that shows its header in the log before its end.
BODY = "A line of a message long enough to be seen before its end.\n" * 1200


def _two_queued(sender: Sender) -> tuple[str, Any, list[str]]:
    alice, bob = sender.mailbox(), sender.mailbox()
    account = sender.account(alice)
    ids = [
        sender.send(account, to=[_address(bob)], subject=f"n{n}", text=BODY)["outboundId"]
        for n in range(2)
    ]
    sender.app.projections.catch_up()
    return account, bob, ids


def _headers_since(sender: Sender, before: int, count: int) -> list[str]:
    """The Message-IDs whose header Postfix read since ``before``, once ``count`` did."""
    postfix = sender.servers.postfix
    _wait_for(lambda: len(postfix.message_ids()) - before >= count, timeout=10)
    return postfix.message_ids()[before:]


def _hold_claim_write(
    sender: Sender, monkeypatch: pytest.MonkeyPatch, before: int, meanwhile: Any = None
) -> dict[str, Any]:
    """Hold the write of the second message's claim (with the first one's ``sent``: a
    write to two streams) until its header reached Postfix, then ``HELD`` more; note
    what Postfix had accepted by then, run ``meanwhile``, then write."""
    store, postfix = sender.app.ctx.store, sender.servers.postfix
    append = store.append
    seen: dict[str, Any] = {}

    def held(events: Any, *args: Any) -> Any:
        two_streams = len({event.originator_id for event in events}) == 2
        if two_streams and "header" not in seen:
            seen["header"] = _headers_since(sender, before, 2)[1]
            time.sleep(HELD)  # room for Postfix to accept it, were the end sent
            seen["accepted_before"] = list(postfix.accepted_ids())
            if meanwhile is not None:
                meanwhile()
        return append(events, *args)

    monkeypatch.setattr(store, "append", held)
    return seen


def test_the_next_message_goes_out_during_its_claims_write_and_ends_after_it(
    make_sender: MakeSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = make_sender(provider_limits=PROVIDER_SAVES)
    account, bob, ids = _two_queued(sender)
    postfix = sender.servers.postfix
    before = len(postfix.message_ids())
    seen = _hold_claim_write(sender, monkeypatch, before)
    waiting = deque(ids)

    assert sender.delivery.run_series(account, lambda: waiting.popleft() if waiting else None) == 2

    monkeypatch.undo()
    assert "header" in seen, "the second message's header reached Postfix during the write"
    assert seen["header"] not in seen["accepted_before"], "accepted before its claim's write"
    assert [sender.outbound(i)["state"] for i in ids] == ["sent", "sent"]
    assert len(_inbox(sender, bob, 2)) == 2
    first, second = _headers_since(sender, before, 2)[:2]
    _wait_for(lambda: postfix.accepted_ids().count(second) == 1)
    assert [postfix.accepted_ids().count(m) for m in (first, second)] == [1, 1]


def test_a_message_taken_by_another_worker_during_the_write_never_ends_here(
    make_sender: MakeSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = make_sender("w1", provider_limits=PROVIDER_SAVES)
    other = make_sender("w2", provider_limits=PROVIDER_SAVES)
    account, bob, ids = _two_queued(sender)
    postfix = sender.servers.postfix
    before = len(postfix.message_ids())
    taken: list[Claim] = []

    def other_worker_claims() -> None:
        step = other.delivery.prepare(ids[1])
        assert isinstance(step, Claim)
        commit(other.app.ctx.store, step.outbound)
        taken.append(step)

    seen = _hold_claim_write(sender, monkeypatch, before, other_worker_claims)
    waiting = deque(ids)

    assert sender.delivery.run_series(account, lambda: waiting.popleft() if waiting else None) == 2

    monkeypatch.undo()
    assert [sender.outbound(i)["state"] for i in ids] == ["sent", "sending"]
    first, second = _headers_since(sender, before, 2)[:2]
    assert seen["header"] == second
    assert len(_inbox(sender, bob, 1)) == 1
    time.sleep(HELD)  # a message accepted would have reached the queue manager by now
    assert postfix.accepted_ids().count(second) == 0, "its end of data was withheld"
    assert "lost connection after DATA" in postfix.log()

    [claim] = taken  # the other worker goes on with its own attempt
    assert other.delivery.submit(claim) is not None
    assert other.delivery.record_sent(claim.outbound, None) == (True, None)
    assert other.outbound(ids[1])["state"] == "sent"
    assert len(_inbox(sender, bob, 2)) == 2
    _wait_for(lambda: postfix.accepted_ids().count(second) == 1)
    assert [postfix.accepted_ids().count(m) for m in (first, second)] == [1, 1]


def test_a_series_killed_while_the_end_of_data_waits_for_the_write(sender: Sender) -> None:
    account, bob, ids = _two_queued(sender)
    postfix = sender.servers.postfix
    before = len(postfix.message_ids())
    child = start_series_child(sender, account, ids)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        # The second message's bytes reached Postfix (cleanup read its header).
        first, second = _headers_since(sender, before, 2)[:2]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)

    _wait_for(lambda: "lost connection after DATA" in postfix.log())
    time.sleep(HELD)  # a message accepted would have reached the queue manager by now
    assert postfix.accepted_ids().count(second) == 0, "no end of data, no message"
    assert len(_inbox(sender, bob, 1)) == 1
    assert [sender.outbound(i)["state"] for i in ids] == ["sending", "queued"]

    assert sender.delivery.run(ids[1]) == "sent", "the second is sent, once"
    assert len(_inbox(sender, bob, 2)) == 2
    _wait_for(lambda: postfix.accepted_ids().count(second) == 1)
    assert [postfix.accepted_ids().count(m) for m in (first, second)] == [1, 1]


def start_series_child(
    sender: Sender, account: str, ids: list[str], lanes: int = 1
) -> subprocess.Popen[str]:
    """``tests.support.series_child`` sending ``ids`` of ``account`` over ``lanes``
    sessions; it prints ``held`` when a claim's write starts."""
    settings = sender.mail.settings
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.series_child",
            settings.database_url,
            str(settings.blob_dir),
            MASTER_KEY,
            str(sender.servers.postfix.ca_file),
            account,
            *ids,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SERIES_LANES": str(lanes)},
    )


def test_the_claims_write_is_made_by_the_lane_itself(
    make_sender: MakeSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = make_sender(provider_limits=PROVIDER_SAVES)
    account, _bob, ids = _two_queued(sender)
    store = sender.app.ctx.store
    writers: list[str] = []
    append = store.append

    def noted(events: Any, *args: Any) -> Any:
        writers.append(threading.current_thread().name)
        return append(events, *args)

    monkeypatch.setattr(store, "append", noted)
    waiting = deque(ids)

    assert sender.delivery.run_series(account, lambda: waiting.popleft() if waiting else None) == 2

    monkeypatch.undo()
    assert [sender.outbound(i)["state"] for i in ids] == ["sent", "sent"]
    # The first claim, the first `sent` with the second claim, the last `sent`: every
    # write in the series' own thread, none handed to another (a fifth of its CPU).
    assert writers == [threading.current_thread().name] * 3
