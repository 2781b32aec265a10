"""Sending through a real Postfix into a real Dovecot, on both backends: a message from
one account arrives in another's INBOX and is ingested there; the Sent copy keeps Bcc,
the transmitted one has none, and the copy read back is one outbound message linked to
its outbox record; the states of an attempt (sent, retrying then sent across a Postfix
restart, failed with the server's reply); two workers racing for one message send it
once."""

from __future__ import annotations

import threading
import time
from typing import Any

from imapclient import IMAPClient

from tests.integration.mail.helpers import messages
from tests.integration.send.conftest import ADMIN, MakeSender, Sender, Servers
from tests.support.postfix import DOMAIN


def _address(box: Any) -> str:
    return f"{box.name}@{DOMAIN}"


def _raw_in(sender: Sender, box: Any, folder: str) -> list[bytes]:
    dovecot = sender.servers.dovecot
    with IMAPClient(dovecot.host, dovecot.port, ssl=False, timeout=10) as client:
        client.login(box.name, box.password)
        client.select_folder(folder, readonly=True)
        uids = client.search(["ALL"])
        fetched = client.fetch(uids, ["BODY.PEEK[]"]) if uids else {}
        return [data[b"BODY[]"] for data in fetched.values()]


def _wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


def test_a_sent_message_arrives_is_ingested_and_its_sent_copy_is_one_outbound_message(
    sender: Sender,
) -> None:
    alice, bob, carol = sender.mailbox(), sender.mailbox(), sender.mailbox()
    alice_id, bob_id = sender.account(alice), sender.account(bob)
    queued = sender.send(
        alice_id, to=[_address(bob)], bcc=[_address(carol)], subject="Quarterly numbers"
    )
    assert queued["state"] == "queued"
    sender.app.projections.catch_up()
    assert queued["outboundId"] in sender.delivery.due()

    assert sender.delivery.run(queued["outboundId"]) == "sent"

    record = sender.outbound(queued["outboundId"])
    assert record["state"] == "sent"
    assert record["lastReply"].startswith("250")
    assert record["sentCopy"] == "appended"
    assert record["subject"] == "Quarterly numbers"
    # Delivered to To and Bcc; the transmitted copy carried no Bcc header.
    assert _wait_for(lambda: _raw_in(sender, bob, "INBOX"))
    assert _wait_for(lambda: _raw_in(sender, carol, "INBOX"))
    assert b"Bcc:" not in _raw_in(sender, bob, "INBOX")[0]
    assert sender.servers.postfix.bcc_warnings() == 0
    # The Sent copy keeps Bcc.
    [copy] = _raw_in(sender, alice, "Sent")
    assert f"Bcc: {_address(carol)}".encode() in copy

    sender.mail.poll()
    received = [m for m in messages(sender.app, ADMIN, accountId=bob_id)]
    assert [m["subject"] for m in received] == ["Quarterly numbers"]
    assert received[0]["direction"] == "inbound"
    mine = messages(sender.app, ADMIN, accountId=alice_id)
    assert len(mine) == 1, "the Sent copy is one message, not two"
    assert mine[0]["direction"] == "outbound"
    assert sender.outbound(queued["outboundId"])["messageId"] == mine[0]["messageId"]


def test_a_reply_carries_in_reply_to_and_references_and_threads_with_the_original(
    sender: Sender,
) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    alice_id, bob_id = sender.account(alice), sender.account(bob)
    first = sender.send(alice_id, to=[_address(bob)], subject="Question")
    assert sender.delivery.run(first["outboundId"]) == "sent"
    _wait_for(lambda: _raw_in(sender, bob, "INBOX"))
    sender.mail.poll()
    [original] = messages(sender.app, ADMIN, accountId=bob_id)

    reply = sender.send(
        bob_id, to=[_address(alice)], subject="Re: Question", inReplyTo=original["messageId"]
    )
    assert sender.delivery.run(reply["outboundId"]) == "sent"
    [raw] = _wait_for(lambda: _raw_in(sender, alice, "INBOX"))
    [asked] = _raw_in(sender, alice, "Sent")
    message_id = next(
        line.split(b":", 1)[1].strip()
        for line in asked.split(b"\r\n")
        if line.lower().startswith(b"message-id:")
    )
    assert b"In-Reply-To: " + message_id in raw
    assert b"References: " + message_id in raw
    sender.mail.poll()
    threads = {m["threadKey"] for m in messages(sender.app, ADMIN, accountId=bob_id)}
    assert len(threads) == 1, "the reply (its Sent copy) threads with the original"


def test_recipients_with_display_names_are_encoded_and_mail_goes_to_their_addresses(
    sender: Sender,
) -> None:
    alice, bob, carol, dave = (sender.mailbox() for _ in range(4))
    alice_id = sender.account(alice)
    queued = sender.send(
        alice_id,
        to=[f"José Müller <{_address(bob)}>"],
        cc=[f'"Doe, John \\"JD\\"" <{_address(carol)}>'],
        bcc=[f"Dave <{_address(dave)}>"],
        subject="Names",
    )
    assert sender.delivery.run(queued["outboundId"]) == "sent"
    [raw] = _wait_for(lambda: _raw_in(sender, bob, "INBOX"))
    assert _wait_for(lambda: _raw_in(sender, carol, "INBOX"))
    assert _wait_for(lambda: _raw_in(sender, dave, "INBOX"))
    head = raw.split(b"\r\n\r\n", 1)[0]
    assert f"To: =?utf-8?q?Jos=C3=A9_M=C3=BCller?= <{_address(bob)}>".encode() in head
    assert f'Cc: "Doe, John \\"JD\\"" <{_address(carol)}>'.encode() in head
    assert b"Dave" not in head
    [copy] = _raw_in(sender, alice, "Sent")
    assert f"Bcc: Dave <{_address(dave)}>".encode() in copy


def test_postfix_stopped_then_started_the_message_retries_then_is_sent_once(
    make_sender: MakeSender, own_servers: Servers
) -> None:
    sender = make_sender(own=own_servers)
    postfix = sender.servers.postfix
    alice, bob = sender.mailbox(), sender.mailbox()
    alice_id = sender.account(alice)
    queued = sender.send(alice_id, to=[_address(bob)], subject="Through a restart")
    postfix.halt()
    try:
        assert sender.delivery.run(queued["outboundId"]) == "retrying"
        record = sender.outbound(queued["outboundId"])
        assert record["state"] == "retrying"
        assert record["errorKind"] in ("transient", "timeout")
        assert record["nextAttemptAt"] is not None
    finally:
        postfix.resume()
    time.sleep(0.6)  # past the backoff
    assert sender.delivery.run(queued["outboundId"]) == "sent"
    assert sender.outbound(queued["outboundId"])["attempts"] == 2
    assert _wait_for(lambda: _raw_in(sender, bob, "INBOX"))


def test_a_5xx_answer_fails_the_message_with_the_reply(sender: Sender) -> None:
    alice = sender.mailbox()
    alice_id = sender.account(alice)
    elsewhere = sender.send(alice_id, to=["someone@elsewhere.example"], subject="Relay")
    assert sender.delivery.run(elsewhere["outboundId"]) == "failed"
    record = sender.outbound(elsewhere["outboundId"])
    assert record["state"] == "failed"
    assert "554" in record["lastReply"]
    assert "Relay access denied" in record["lastReply"]
    # A failed message is final: nothing is due any more.
    assert elsewhere["outboundId"] not in sender.delivery.due()


def test_a_wrong_password_fails_with_the_servers_answer(sender: Sender) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    alice_id = sender.account(alice)
    ok_update = sender.app.write(
        "update-mail-account",
        {"accountId": alice_id, "secret": "not-the-password"},
        ADMIN,
    )
    assert ok_update.is_success
    queued = sender.send(alice_id, to=[_address(bob)])
    assert sender.delivery.run(queued["outboundId"]) == "failed"
    assert "535" in sender.outbound(queued["outboundId"])["lastReply"]


def test_implicit_tls_submission(sender: Sender) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    alice_id = sender.account(alice, smtp_port=sender.servers.postfix.smtps_port, security="tls")
    queued = sender.send(alice_id, to=[_address(bob)], subject="Over implicit TLS")
    assert sender.delivery.run(queued["outboundId"]) == "sent"
    assert _wait_for(lambda: _raw_in(sender, bob, "INBOX"))


def test_two_workers_racing_for_one_message_send_it_once(make_sender: MakeSender) -> None:
    first = make_sender("w1")
    second = make_sender("w2")
    alice, bob = first.mailbox(), first.mailbox()
    alice_id = first.account(alice)
    queued = first.send(alice_id, to=[_address(bob)], subject="Only once")
    outbound_id = queued["outboundId"]
    barrier = threading.Barrier(2)
    answers: list[str | None] = []

    def run(worker: Sender) -> None:
        barrier.wait()
        answers.append(worker.delivery.run(outbound_id))

    threads = [threading.Thread(target=run, args=(w,)) for w in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(answers, key=str) == sorted(["sent", None], key=str)
    [copy] = _raw_in(first, alice, "Sent")
    ours = next(
        line.split(b":", 1)[1].strip().decode()
        for line in copy.split(b"\r\n")
        if line.lower().startswith(b"message-id:")
    )
    assert first.servers.postfix.message_ids().count(ours) == 1
    assert first.outbound(outbound_id)["attempts"] == 1
