"""The worker's outbox thread (``workers.outbound.run_outbound``) sends what is queued,
each message once, at once when ``send-message`` signals it, and stops when told (both
backends)."""

from __future__ import annotations

import threading
import time

from infrastructure.bootstrap_workers import outbox_signals
from tests.integration.send.conftest import Sender
from tests.integration.send.test_send import _address, _raw_in, _wait_for
from workers.outbound import OutboxWake, run_outbound


def test_the_outbox_thread_sends_what_is_queued(sender: Sender) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    account = sender.account(alice)
    ids = [
        sender.send(account, to=[_address(bob)], subject=f"n{n}")["outboundId"] for n in range(3)
    ]
    stop = threading.Event()
    thread = threading.Thread(target=run_outbound, args=(sender.delivery, stop, 0.05, 2))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            sender.app.projections.catch_up()  # PostgreSQL: what `projections run` does
            if all(sender.outbound(i)["state"] == "sent" for i in ids):
                break
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()
    assert [sender.outbound(i)["state"] for i in ids] == ["sent"] * 3
    assert [sender.outbound(i)["attempts"] for i in ids] == [1, 1, 1]
    assert (
        len(
            _wait_for(
                lambda: len(_raw_in(sender, bob, "INBOX")) == 3 and _raw_in(sender, bob, "INBOX")
            )
        )
        == 3
    )
    subjects = sorted(
        next(
            line.split(b":", 1)[1].strip()
            for line in raw.split(b"\r\n")
            if line.lower().startswith(b"subject:")
        )
        for raw in _raw_in(sender, bob, "INBOX")
    )
    assert subjects == [b"n0", b"n1", b"n2"]


def test_send_message_wakes_the_outbox_thread_at_once(sender: Sender) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    account = sender.account(alice)
    wake = OutboxWake()
    outbox_signals(sender.app, sender.mail.settings, wake.on_signal)
    stop = threading.Event()
    thread = threading.Thread(target=run_outbound, args=(sender.delivery, stop, 3600.0, 2, wake))
    thread.start()
    try:
        started = time.monotonic()
        outbound_id = sender.send(account, to=[_address(bob)], subject="At once")["outboundId"]
        while time.monotonic() - started < 10:
            if sender.outbound(outbound_id)["state"] == "sent":
                break
            time.sleep(0.02)
        took = time.monotonic() - started
    finally:
        stop.set()
        wake.event.set()
        thread.join(15)
    assert sender.outbound(outbound_id)["state"] == "sent"
    assert took < 5, "sent on the signal, not at the next scan (an hour away)"
