"""The SMTP transaction pipelined (RFC 2920) where the server offers it: MAIL, every RCPT
and DATA in one write, their answers read in order. Against Postfix (both backends): a
message over a kept connection takes two writes of ours, and a recipient Postfix refuses
(relay access denied) is reported while the other gets the message. Against a scripted
server on loopback: the commands arrive before any answer; a refused sender, every
recipient refused (even with a 354 after them), or a 421 after a recipient never send
the message's end; without PIPELINING the client waits for each answer as before."""

from __future__ import annotations

import smtplib
import time
from typing import Any

import pytest

from infrastructure.smtp.client import BoundedSMTP
from tests.integration.send.conftest import Sender
from tests.integration.send.test_send import _address, _raw_in, _wait_for
from tests.support.scripted_smtp import ScriptedSmtpServer

MESSAGE = b"Subject: hi\r\n\r\nhello\r\n"
TO = ["a@example.test", "b@example.test"]


def _client(server: ScriptedSmtpServer) -> BoundedSMTP:
    client = BoundedSMTP(server.host, deadline=time.monotonic() + 10)
    client.connect(server.host, server.port)
    client.ehlo()
    return client


def test_the_commands_go_out_before_any_answer() -> None:
    answers = [b"250 ok", b"250 ok", b"250 ok", b"354 go on"]
    with ScriptedSmtpServer(batch=4, answers=answers) as server:
        client = _client(server)
        assert client.sendmail("me@example.test", TO, MESSAGE) == {}
        client.close()
    assert server.first_batch == [
        b"mail FROM:<me@example.test> size=22\r\n",
        b"rcpt TO:<a@example.test>\r\n",
        b"rcpt TO:<b@example.test>\r\n",
        b"data\r\n",
    ]
    assert server.message == MESSAGE


def test_one_recipient_refused_the_other_gets_it() -> None:
    answers = [b"250 ok", b"550 5.1.1 no such user", b"250 ok", b"354 go on"]
    with ScriptedSmtpServer(batch=4, answers=answers) as server:
        client = _client(server)
        refused = client.sendmail("me@example.test", TO, MESSAGE)
        client.close()
    assert refused == {"a@example.test": (550, b"5.1.1 no such user")}
    assert server.message == MESSAGE


@pytest.mark.parametrize(
    ("answers", "raised"),
    [
        ([b"550 5.7.1 not you", b"503 no", b"503 no", b"503 no"], smtplib.SMTPSenderRefused),
        ([b"421 4.3.0 closing"], smtplib.SMTPSenderRefused),
        (
            [b"250 ok", b"550 no", b"550 no", b"554 no valid recipients"],
            smtplib.SMTPRecipientsRefused,
        ),
        # A server that says 354 although it took no recipient: still no message.
        ([b"250 ok", b"550 no", b"450 later", b"354 go on"], smtplib.SMTPRecipientsRefused),
        ([b"250 ok", b"421 4.3.0 closing"], smtplib.SMTPRecipientsRefused),
        ([b"250 ok", b"250 ok", b"250 ok", b"451 4.3.0 try later"], smtplib.SMTPDataError),
    ],
    ids=["sender-refused", "closing-at-mail", "all-refused", "354-anyway", "closing", "data"],
)
def test_a_refusal_never_sends_the_message(answers: list[bytes], raised: Any) -> None:
    with ScriptedSmtpServer(batch=4, answers=answers, wait=0.5) as server:
        client = _client(server)
        with pytest.raises(raised):
            client.sendmail("me@example.test", TO, MESSAGE)
        assert not client.message_sent
        client.close()
    assert server.message is None
    assert b".\r\n" not in server.lines


def test_without_pipelining_each_answer_is_waited_for() -> None:
    # The server answers nothing before four lines came: a client that waits gets there
    # with MAIL alone, and the server gives up.
    with ScriptedSmtpServer(
        batch=4, answers=[b"250 ok"], extensions=[b"SIZE 1000000"], wait=0.5
    ) as server:
        client = _client(server)
        with pytest.raises(smtplib.SMTPServerDisconnected):
            client.sendmail("me@example.test", TO, MESSAGE)
        client.close()
    assert server.first_batch == [b"mail FROM:<me@example.test> size=22\r\n"]


def test_a_message_over_a_kept_postfix_connection_takes_two_writes(
    sender: Sender, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    account = sender.account(alice)
    first = sender.send(account, to=[_address(bob)], subject="opens the connection")
    assert sender.delivery.run(first["outboundId"]) == "sent"
    writes: list[bytes] = []
    send = BoundedSMTP.send

    def counted(self: BoundedSMTP, data: Any) -> None:
        writes.append(data if isinstance(data, bytes) else data.encode())
        send(self, data)

    monkeypatch.setattr(BoundedSMTP, "send", counted)
    elsewhere = "someone@elsewhere.test"  # relay access denied, at its RCPT
    second = sender.send(account, to=[_address(bob), elsewhere], subject="over the kept one")

    assert sender.delivery.run(second["outboundId"]) == "sent"

    monkeypatch.undo()
    assert len(writes) == 2, "MAIL, both RCPT and DATA in one write; the message in one"
    assert writes[0].count(b"\r\n") == 4 and writes[0].endswith(b"data\r\n")
    record = sender.outbound(second["outboundId"])
    assert "1 recipients refused: 554" in record["lastReply"]
    assert _wait_for(lambda: len(_raw_in(sender, bob, "INBOX")) == 2)
