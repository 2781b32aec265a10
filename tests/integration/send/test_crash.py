"""A worker killed (kill -9) after Postfix accepted a message's DATA and before the
outcome was recorded, on both backends: the message stays ``sending`` until its claim
lapses, is never submitted again, and is resolved by the Sent folder: ``sent`` when the
copy is there (as where the provider files sent mail itself), else ``uncertain``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from imapclient import IMAPClient

from tests.integration.mail.conftest import MASTER_KEY
from tests.integration.send.conftest import ADMIN, Sender
from tests.integration.send.test_send import _address, _raw_in, _wait_for
from tests.support.send_child import LEASE

ROOT = Path(__file__).resolve().parents[3]


def _message_id(raw: bytes) -> str:
    return next(
        line.split(b":", 1)[1].strip().decode()
        for line in raw.split(b"\r\n")
        if line.lower().startswith(b"message-id:")
    )


@pytest.mark.parametrize("copy_in_sent", [True, False], ids=["found", "not-found"])
def test_a_worker_killed_between_the_servers_250_and_the_record(
    sender: Sender, copy_in_sent: bool
) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    alice_id = sender.account(alice)
    queued = sender.send(alice_id, to=[_address(bob)], subject="Killed mid-send")
    outbound_id = queued["outboundId"]
    settings = sender.mail.settings
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.send_child",
            settings.database_url,
            str(settings.blob_dir),
            MASTER_KEY,
            str(sender.servers.postfix.ca_file),
            outbound_id,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "accepted"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    # Postfix really took it: the recipient has it.
    [delivered] = _wait_for(lambda: _raw_in(sender, bob, "INBOX"))
    message_id = _message_id(delivered)
    assert sender.servers.postfix.message_ids().count(message_id) == 1
    record = sender.outbound(outbound_id)
    assert record["state"] == "sending"
    assert sender.delivery.run(outbound_id) is None, "a live claim is left alone"

    if copy_in_sent:  # the provider filed the sent message itself (as Gmail does)
        dovecot = sender.servers.dovecot
        with IMAPClient(dovecot.host, dovecot.port, ssl=False, timeout=10) as client:
            client.login(alice.name, alice.password)
            client.append("Sent", delivered, (b"\\Seen",))
    time.sleep(LEASE + 0.5)
    sender.app.projections.catch_up()
    assert outbound_id in sender.delivery.due()

    state = sender.delivery.run(outbound_id)

    assert state == ("sent" if copy_in_sent else "uncertain")
    record = sender.outbound(outbound_id)
    assert record["state"] == state
    assert record["attempts"] == 1
    assert outbound_id not in sender.delivery.due(), "never resent on its own"
    assert sender.delivery.run(outbound_id) is None
    assert sender.servers.postfix.message_ids().count(message_id) == 1
    items = sender.app.query("list-outbound", {"accountId": alice_id, "state": state}, ADMIN)
    assert [i["outboundId"] for i in items.data["items"]] == [outbound_id]
