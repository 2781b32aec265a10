"""The copy in Sent when its APPEND fails (both backends, the real Dovecot refusing to
write the folder): recorded ``retrying``, found due by the outbox's scan and appended
once the folder can be written, exactly one copy; and when the folder stays unwritable,
given up after ``MAX_COPY_ATTEMPTS`` tries, ``failed``. Another account's copy is not
held up by it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from imapclient import IMAPClient

from domain.outbound import MAX_COPY_ATTEMPTS
from tests.integration.send.conftest import Sender
from tests.integration.send.test_send import _address, _raw_in, _wait_for


@contextmanager
def _unwritable_sent(sender: Sender, box: Any) -> Iterator[None]:
    """Dovecot (running as the user) cannot write the Sent maildir's ``tmp``: APPEND
    fails with the server's NO."""
    dovecot = sender.servers.dovecot
    with IMAPClient(dovecot.host, dovecot.port, ssl=False, timeout=10) as client:
        client.login(box.name, box.password)
        client.select_folder("Sent")  # the folder exists on disk
    tmp = box.maildir / ".Sent" / "tmp"
    mode = tmp.stat().st_mode
    os.chmod(tmp, 0o500)
    try:
        yield
    finally:
        os.chmod(tmp, mode)


def _retry_when_due(sender: Sender, outbound_id: str) -> str | None:
    time.sleep(0.6)  # past the backoff (send_retry_longest is 0.5 s here)
    sender.app.projections.catch_up()
    assert outbound_id in sender.delivery.due()
    return sender.delivery.run(outbound_id)


def test_a_failed_append_is_retried_and_the_copy_saved_once(sender: Sender) -> None:
    alice, bob, carol = sender.mailbox(), sender.mailbox(), sender.mailbox()
    alice_id, carol_id = sender.account(alice), sender.account(carol)
    with _unwritable_sent(sender, alice):
        queued = sender.send(alice_id, to=[_address(bob)], subject="Copy later")["outboundId"]
        assert sender.delivery.run(queued) == "sent"
        record = sender.outbound(queued)
        assert (record["state"], record["sentCopy"]) == ("sent", "retrying")
        assert _raw_in(sender, alice, "Sent") == []
        # Another account's copy goes in meanwhile.
        other = sender.send(carol_id, to=[_address(bob)], subject="Copy now")["outboundId"]
        assert sender.delivery.run(other) == "sent"
        assert sender.outbound(other)["sentCopy"] == "appended"
    assert _wait_for(lambda: len(_raw_in(sender, bob, "INBOX")) == 2)

    assert _retry_when_due(sender, queued) == "sent"

    record = sender.outbound(queued)
    assert (record["state"], record["sentCopy"], record["attempts"]) == ("sent", "appended", 1)
    [copy] = _raw_in(sender, alice, "Sent")
    assert b"Subject: Copy later" in copy
    assert queued not in sender.delivery.due()
    assert sender.delivery.run(queued) is None, "nothing more to do"
    assert len(_raw_in(sender, alice, "Sent")) == 1


def test_a_copy_that_keeps_failing_is_given_up_after_its_tries(sender: Sender) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    alice_id = sender.account(alice)
    with _unwritable_sent(sender, alice):
        queued = sender.send(alice_id, to=[_address(bob)], subject="Never copied")["outboundId"]
        assert sender.delivery.run(queued) == "sent"
        for _ in range(MAX_COPY_ATTEMPTS - 1):
            assert sender.outbound(queued)["sentCopy"] == "retrying"
            assert _retry_when_due(sender, queued) == "sent"
    record = sender.outbound(queued)
    assert (record["state"], record["sentCopy"]) == ("sent", "failed")
    sender.app.projections.catch_up()
    assert queued not in sender.delivery.due()
    assert _raw_in(sender, alice, "Sent") == []
