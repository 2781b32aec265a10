"""An account's messages over one kept SMTP connection, on both backends: a series sends
them over one Postfix connection (counted in Postfix's log) with one durable write each;
a connection dropped between two messages (a proxy cuts it, or Postfix ends it with 421
after its idle timeout) is replaced and the second message is still sent once;
connections are never shared between accounts; an idle one is closed after its time."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from application.mail.outbound.delivery import SERIES_LIMIT
from infrastructure.devkit.processes import free_port
from infrastructure.smtp.submission import SmtpSubmitter
from tests.integration.send.conftest import MakeSender, Sender, Servers
from tests.integration.send.test_crash import _message_id
from tests.integration.send.test_send import _address, _raw_in, _wait_for
from tests.support.dovecot import DovecotServer
from tests.support.postfix import PostfixServer, dovecot_config
from tests.support.tcp_proxy import TcpProxy

# One SMTP session per account: what these tests count is one connection's series
# (test_lanes.py sends over several).
PROVIDER_SAVES = {"127.0.0.1": {"name": "local", "saves_sent": True, "send_connections": 1}}


def _new_connections(sender: Sender, before: int, expected: int) -> int:
    """Postfix's count of connections since ``before`` (its log is written a moment
    after the fact): the count once ``expected`` is reached, or after a wait."""
    postfix = sender.servers.postfix
    _wait_for(lambda: postfix.connections() - before >= expected, timeout=5)
    time.sleep(0.2)  # nothing more comes
    return postfix.connections() - before


def _inbox(sender: Sender, box: Any, count: int) -> list[bytes]:
    found: list[bytes] = _wait_for(
        lambda: len(_raw_in(sender, box, "INBOX")) == count and _raw_in(sender, box, "INBOX")
    )
    assert len(found) == count
    return found


def _pool(sender: Sender) -> Any:
    smtp = sender.delivery.smtp
    assert isinstance(smtp, SmtpSubmitter)
    return smtp.connections


def test_an_accounts_messages_go_over_one_connection_with_one_write_each(
    make_sender: MakeSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = make_sender(provider_limits=PROVIDER_SAVES)
    alice, bob = sender.mailbox(), sender.mailbox()
    account = sender.account(alice)
    ids = [
        sender.send(account, to=[_address(bob)], subject=f"n{n}")["outboundId"] for n in range(4)
    ]
    sender.app.projections.catch_up()
    store = sender.app.ctx.store
    writes: list[int] = []
    append = store.append

    def counted(events: Any, *args: Any) -> Any:
        writes.append(len(events))
        return append(events, *args)

    monkeypatch.setattr(store, "append", counted)
    before = sender.servers.postfix.connections()
    waiting = deque(ids[:2])  # the rest from the read model

    assert sender.delivery.run_series(account, lambda: waiting.popleft() if waiting else None) == 4

    monkeypatch.undo()
    assert [sender.outbound(i)["state"] for i in ids] == ["sent"] * 4
    assert [sender.outbound(i)["attempts"] for i in ids] == [1] * 4
    assert _new_connections(sender, before, 1) == 1
    # The first claim alone, each `sent` (with the copy's record) with the next claim,
    # the last `sent` alone: five writes for four messages, not eight.
    assert writes == [1, 3, 3, 3, 2]
    inbox = _inbox(sender, bob, 4)
    taken = sender.servers.postfix.message_ids()
    assert all(taken.count(_message_id(raw)) == 1 for raw in inbox)


def test_a_connection_dropped_between_two_messages_the_second_is_sent_once(
    sender: Sender,
) -> None:
    postfix = sender.servers.postfix
    alice, bob = sender.mailbox(), sender.mailbox()
    with TcpProxy(postfix.host, postfix.submission_port) as proxy:
        account = sender.account(alice, smtp_port=proxy.port)
        first = sender.send(account, to=[_address(bob)], subject="Before the cut")["outboundId"]
        second = sender.send(account, to=[_address(bob)], subject="After the cut")["outboundId"]
        assert sender.delivery.run(first) == "sent"
        assert len(_pool(sender)) == 1
        proxy.cut()  # the kept connection is gone; the worker does not know yet

        assert sender.delivery.run(second) == "sent"

        assert proxy.connections == 2
    record = sender.outbound(second)
    assert (record["state"], record["attempts"]) == ("sent", 1)
    inbox = _inbox(sender, bob, 2)
    taken = postfix.message_ids()
    assert sorted(taken.count(_message_id(raw)) for raw in inbox) == [1, 1]


def test_kept_connections_are_never_shared_between_accounts(sender: Sender) -> None:
    postfix = sender.servers.postfix
    bob = sender.mailbox()
    with TcpProxy(postfix.host, postfix.submission_port) as proxy:
        one = sender.account(sender.mailbox(), smtp_port=proxy.port)
        two = sender.account(sender.mailbox(), smtp_port=proxy.port)
        for account in (one, two, one, two):
            queued = sender.send(account, to=[_address(bob)])["outboundId"]
            assert sender.delivery.run(queued) == "sent"
        assert proxy.connections == 2
        assert len(_pool(sender)) == 2


def test_an_idle_kept_connection_is_closed_after_its_time(make_sender: MakeSender) -> None:
    # Long enough that a loaded machine's pause between the send and the first look
    # cannot pass it (0.3 s did, once, at a load of 12-22).
    sender = make_sender(send_idle_seconds=1.5)
    alice, bob = sender.mailbox(), sender.mailbox()
    account = sender.account(alice)
    queued = sender.send(account, to=[_address(bob)])["outboundId"]
    assert sender.delivery.run(queued) == "sent"
    assert len(_pool(sender)) == 1
    postfix = sender.servers.postfix
    closed = postfix.log().count("disconnect from")
    sender.delivery.close_idle()
    assert len(_pool(sender)) == 1, "not yet idle long enough"
    time.sleep(1.6)
    sender.delivery.close_idle()
    assert len(_pool(sender)) == 0
    assert _wait_for(lambda: postfix.log().count("disconnect from") == closed + 1)
    assert "quit=1" in postfix.log().rsplit("disconnect from", 1)[-1].splitlines()[0]


def test_a_series_ends_after_its_limit(make_sender: MakeSender) -> None:
    sender = make_sender(provider_limits=PROVIDER_SAVES)
    account = sender.account(sender.mailbox())
    bob = sender.mailbox()
    ids = [sender.send(account, to=[_address(bob)])["outboundId"] for _ in range(3)]
    sender.app.projections.catch_up()
    assert sender.delivery.run_series(account, lambda: None, limit=2) == 2
    assert sorted(sender.outbound(i)["state"] for i in ids) == ["queued", "sent", "sent"]
    assert SERIES_LIMIT >= 10


@pytest.fixture
def impatient_servers() -> Iterator[Servers]:
    """A Postfix that ends a connection idle for 2 s with ``421 ... timeout exceeded``."""
    lmtp_port = free_port()
    with (
        DovecotServer(extra_config=dovecot_config(lmtp_port)) as dovecot,
        PostfixServer(dovecot, lmtp_port, smtpd_options="-o smtpd_timeout=2s") as postfix,
    ):
        yield Servers(dovecot, postfix)


def test_a_kept_connection_the_server_closed_with_421_is_replaced(
    make_sender: MakeSender, impatient_servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    sender = make_sender(own=impatient_servers, send_idle_seconds=60)
    postfix = impatient_servers.postfix
    alice, bob = sender.mailbox(), sender.mailbox()
    account = sender.account(alice)
    first = sender.send(account, to=[_address(bob)], subject="Before the timeout")["outboundId"]
    second = sender.send(account, to=[_address(bob)], subject="After it")["outboundId"]
    before = postfix.connections()
    assert sender.delivery.run(first) == "sent"
    assert _wait_for(lambda: "timeout after" in postfix.log(), timeout=8)

    with caplog.at_level(logging.INFO, logger="tidings.smtp"):
        assert sender.delivery.run(second) == "sent"

    assert any("kept_connection_dropped" in r.getMessage() for r in caplog.records)
    assert _new_connections(sender, before, 2) == 2
    assert sender.outbound(second)["attempts"] == 1
    inbox = _inbox(sender, bob, 2)
    assert sorted(postfix.message_ids().count(_message_id(raw)) for raw in inbox) == [1, 1]
