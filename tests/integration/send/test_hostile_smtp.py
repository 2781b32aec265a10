"""A hostile SMTP server (dripping bytes, a multi-megabyte line, a reply that never ends,
silence) fails only its own account's message, within the attempt's deadline and without
buffering what it sends, while another account's message goes out through Postfix at the
same time (both backends)."""

from __future__ import annotations

import threading
import time
import tracemalloc

import pytest

from tests.integration.send.conftest import MakeSender
from tests.integration.send.test_send import _address, _raw_in, _wait_for
from tests.support.hostile_smtp import HostileSmtpServer, Mode

DEADLINE = 2.0


@pytest.mark.parametrize("mode", ["drip", "huge_line", "endless", "silent"])
def test_a_hostile_server_fails_only_its_own_account_within_the_deadline(
    make_sender: MakeSender, mode: Mode
) -> None:
    sender = make_sender(send_attempt_timeout=DEADLINE)
    good_box, bob = sender.mailbox(), sender.mailbox()
    good = sender.account(good_box)
    with HostileSmtpServer(mode) as hostile:
        bad = sender.account(sender.mailbox(), smtp_port=hostile.port)
        bad_message = sender.send(bad, to=[_address(bob)], subject="To a hostile server")
        good_message = sender.send(good, to=[_address(bob)], subject="Through Postfix")
        outcome: dict[str, object] = {}

        def attempt() -> None:
            started = time.monotonic()
            tracemalloc.start()
            outcome["state"] = sender.delivery.run(bad_message["outboundId"])
            outcome["peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            outcome["seconds"] = time.monotonic() - started

        hostile_attempt = threading.Thread(target=attempt)
        hostile_attempt.start()
        assert sender.delivery.run(good_message["outboundId"]) == "sent"
        assert _wait_for(lambda: _raw_in(sender, bob, "INBOX"))
        hostile_attempt.join(DEADLINE + 10)
        assert not hostile_attempt.is_alive()
    assert outcome["state"] == "retrying"
    assert isinstance(outcome["seconds"], float) and outcome["seconds"] < DEADLINE + 1.5
    assert isinstance(outcome["peak"], int) and outcome["peak"] < 4 * 1024 * 1024
    record = sender.outbound(bad_message["outboundId"])
    assert record["state"] == "retrying"
    if mode in ("drip", "silent"):  # cut at the deadline
        assert record["errorKind"] == "timeout"
    else:  # cut by the reply's bounds, long before the deadline
        assert record["errorKind"] == "transient"
        assert "too l" in record["lastReply"]
        assert outcome["seconds"] < 1.0
    assert len(record["lastReply"]) <= 1000
    assert sender.outbound(good_message["outboundId"])["state"] == "sent"
