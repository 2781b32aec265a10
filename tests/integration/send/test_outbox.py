"""The outbox's handlers on both backends: idempotency keys (the same key answers the
same message, also racing; another payload with it is 409), header injection and size
limits, the provider's daily send limit, who may send, cancel, replies to another
account's message, the feed's outbound items, and XOAUTH2 submission."""

from __future__ import annotations

import base64
import threading
from typing import Any

import pytest

from application import User
from domain.outbound import OutboundQueued
from tests.integration.mail.helpers import count_events
from tests.integration.send.conftest import ADMIN, MakeSender, Sender
from tests.integration.send.test_send import _address, _raw_in, _wait_for
from tests.support.results import failed, ok

MEMBER = User(id="member", tenant_id=ADMIN.tenant_id, roles=frozenset({"TenantMember"}))
OTHER_MEMBER = User(id="other", tenant_id=ADMIN.tenant_id, roles=frozenset({"TenantMember"}))
STRANGER = User(id="admin", tenant_id="t-elsewhere", roles=frozenset({"TenantAdmin"}))


def _payload(account_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "accountId": account_id,
        "to": ["someone@example.test"],
        "subject": "hi",
        "text": "body",
        "idempotencyKey": "k-1",
        **fields,
    }


def test_the_same_idempotency_key_answers_the_same_message(sender: Sender) -> None:
    account = sender.account(sender.mailbox())
    first = ok(sender.app.write("send-message", _payload(account), ADMIN))
    again = ok(sender.app.write("send-message", _payload(account), ADMIN))
    assert again["outboundId"] == first["outboundId"]
    assert again["replayed"] is True
    details = failed(
        sender.app.write("send-message", _payload(account, subject="changed"), ADMIN),
        "idempotency_key_reused",
        409,
    )
    assert details["outboundId"] == first["outboundId"]
    other = ok(sender.app.write("send-message", _payload(account, idempotencyKey="k-2"), ADMIN))
    assert other["outboundId"] != first["outboundId"]


def test_racing_requests_with_one_key_make_one_message(make_sender: MakeSender) -> None:
    senders = [make_sender(f"w{n}") for n in range(4)]
    account = senders[0].account(senders[0].mailbox())
    barrier = threading.Barrier(8)
    answers: list[dict[str, Any]] = []

    def request(sender: Sender) -> None:
        barrier.wait()
        answers.append(ok(sender.app.write("send-message", _payload(account), ADMIN)))

    threads = [threading.Thread(target=request, args=(senders[n % 4],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == 8
    assert len({a["outboundId"] for a in answers}) == 1
    assert count_events(senders[0].app, OutboundQueued.TOPIC) == 1


@pytest.mark.parametrize(
    "fields",
    [
        {"subject": "hi\r\nBcc: victim@example.test"},
        {"subject": "hi\nX-Injected: 1"},
        {"to": ["a@example.test\r\nBcc: victim@example.test"]},
        {"cc": ["a@example.test>\n"]},
        {"idempotencyKey": "k\r\n"},
        {
            "attachments": [
                {"filename": "a\r\nX: y.txt", "contentType": "text/plain", "contentBase64": "aGk="}
            ]
        },
        {
            "attachments": [
                {"filename": "a.txt", "contentType": "text/plain\r\nX: y", "contentBase64": "aGk="}
            ]
        },
        {"attachments": [{"filename": "a.txt", "contentBase64": "not base64!"}]},
        {"to": [], "cc": [], "bcc": []},
        {"to": [f"r{n}@example.test" for n in range(101)]},
        {"to": ["Eve\r\n <a@example.test>"]},
        {"to": ['"Eve\nBcc: victim@example.test" <a@example.test>']},
        {"to": ["E" * 201 + " <a@example.test>"]},
        {"to": ["=?utf-8?q?boss=40bank.example?= <a@example.test>"]},
        {"bcc": ['"=?utf-8?b?Ym9zc0BiYW5rLmV4YW1wbGU=?=" <a@example.test>']},
        {"cc": ["Doe, John <a@example.test>"]},
        {"to": ["Eve\x00 <a@example.test>"]},
        {"to": ['"unterminated <a@example.test>']},
        {"to": ["Eve <a@example.test>, b@example.test"]},
        {"to": ["Eve <not an address>"]},
    ],
    ids=[
        "subject-crlf",
        "subject-lf",
        "to-crlf",
        "cc-lf",
        "key-crlf",
        "filename-crlf",
        "content-type-crlf",
        "bad-base64",
        "no-recipients",
        "too-many-recipients",
        "name-crlf",
        "quoted-name-lf",
        "name-overlong",
        "name-encoded-word",
        "quoted-name-encoded-word",
        "name-unquoted-comma",
        "name-nul",
        "name-unterminated-quote",
        "two-recipients-in-one",
        "name-with-no-address",
    ],
)
def test_header_injection_and_bad_values_are_400_and_queue_nothing(
    sender: Sender, fields: dict[str, Any]
) -> None:
    account = sender.account(sender.mailbox())
    failed(
        sender.app.write("send-message", _payload(account, **fields), ADMIN), "invalid_payload", 400
    )
    assert count_events(sender.app, OutboundQueued.TOPIC) == 0


def test_a_message_over_max_send_mb_is_413(make_sender: MakeSender) -> None:
    sender = make_sender(max_send_mb=0.05)  # about 52 KB
    account = sender.account(sender.mailbox())
    small = base64.b64encode(b"x" * 10_000).decode()
    ok(
        sender.app.write(
            "send-message",
            _payload(account, attachments=[{"filename": "a.bin", "contentBase64": small}]),
            ADMIN,
        )
    )
    big = base64.b64encode(b"x" * 60_000).decode()
    details = failed(
        sender.app.write(
            "send-message",
            _payload(
                account,
                idempotencyKey="k-big",
                attachments=[{"filename": "b.bin", "contentBase64": big}],
            ),
            ADMIN,
        ),
        "message_too_large",
        413,
    )
    assert details["sizeBytes"] > details["limitBytes"]


def test_the_providers_daily_send_limit_is_429(make_sender: MakeSender) -> None:
    sender = make_sender(provider_limits={"127.0.0.1": {"daily_send_limit": 2}})
    account = sender.account(sender.mailbox())
    for key in ("k-1", "k-2"):
        ok(sender.app.write("send-message", _payload(account, idempotencyKey=key), ADMIN))
        sender.app.projections.catch_up()
    details = failed(
        sender.app.write("send-message", _payload(account, idempotencyKey="k-3"), ADMIN),
        "send_limit",
        429,
    )
    assert details["limit"] == 2
    # The same key again still answers its message: a retry is not a new send.
    ok(sender.app.write("send-message", _payload(account, idempotencyKey="k-1"), ADMIN))


def test_who_may_send(sender: Sender) -> None:
    shared = sender.account(sender.mailbox())
    ok(sender.app.write("send-message", _payload(shared), MEMBER))
    failed(
        sender.app.write("send-message", _payload(shared, idempotencyKey="x"), STRANGER),
        "not_found",
        404,
    )
    box = sender.mailbox()
    payload = {
        "provider": "imap",
        "displayName": "mine",
        "address": f"{box.name}@example.test",
        "scope": "user",
        "authMethod": "password",
        "imap": {
            "host": sender.servers.dovecot.host,
            "port": sender.servers.dovecot.port,
            "security": "none",
            "username": box.name,
        },
        "secret": box.password,
    }
    personal = ok(sender.app.write("connect-mail-account", payload, MEMBER))["accountId"]
    failed(
        sender.app.write("send-message", _payload(personal), MEMBER),
        "smtp_not_configured",
        422,
    )
    smtp = {
        "host": sender.servers.postfix.host,
        "port": sender.servers.postfix.submission_port,
        "security": "starttls",
        "username": box.name,
    }
    # A new SMTP server gets the secret again, never the stored one on its own.
    failed(
        sender.app.write("update-mail-account", {"accountId": personal, "smtp": smtp}, MEMBER),
        "secret_required",
        422,
    )
    ok(
        sender.app.write(
            "update-mail-account",
            {"accountId": personal, "smtp": smtp, "secret": box.password},
            MEMBER,
        )
    )
    mine = ok(sender.app.write("send-message", _payload(personal), MEMBER))["outboundId"]
    cancel = {"outboundId": mine}
    failed(sender.app.write("cancel-outbound", cancel, ADMIN), "forbidden", 403)
    failed(sender.app.write("cancel-outbound", cancel, OTHER_MEMBER), "not_found", 404)
    failed(
        sender.app.write("send-message", _payload(personal, idempotencyKey="o"), OTHER_MEMBER),
        "not_found",
        404,
    )
    failed(
        sender.app.write("send-message", _payload(personal, idempotencyKey="a"), ADMIN),
        "forbidden",
        403,
    )


def test_an_internal_smtp_host_is_refused(make_sender: MakeSender) -> None:
    sender = make_sender(allow_private_hosts=False)
    box = sender.mailbox()
    payload = {
        "provider": "imap",
        "displayName": "x",
        "address": f"{box.name}@example.test",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": "imap.example.com", "port": 993, "security": "tls", "username": "x"},
        "smtp": {"host": "127.0.0.1", "port": 587, "security": "starttls", "username": "x"},
        "secret": "pw",
    }
    failed(sender.app.write("connect-mail-account", payload, ADMIN), "host_not_allowed", 422)


def test_cancel_while_waiting_then_never_sent(sender: Sender) -> None:
    account = sender.account(sender.mailbox())
    queued = ok(sender.app.write("send-message", _payload(account), ADMIN))
    outbound_id = queued["outboundId"]
    canceled = ok(sender.app.write("cancel-outbound", {"outboundId": outbound_id}, ADMIN))
    assert canceled["state"] == "canceled"
    failed(
        sender.app.write("cancel-outbound", {"outboundId": outbound_id}, ADMIN),
        "not_cancelable",
        409,
    )
    failed(
        sender.app.write("cancel-outbound", {"outboundId": outbound_id}, STRANGER),
        "not_found",
        404,
    )
    assert sender.delivery.run(outbound_id) is None
    assert sender.outbound(outbound_id)["state"] == "canceled"
    assert outbound_id not in sender.delivery.due()


def test_in_reply_to_must_be_a_message_of_this_account(sender: Sender) -> None:
    account = sender.account(sender.mailbox())
    failed(
        sender.app.write(
            "send-message",
            _payload(account, inReplyTo="7d8e0b4e-57c4-4bd4-9d5c-0a6f7a4b1a11"),
            ADMIN,
        ),
        "not_found",
        404,
    )


def test_the_feed_tells_queued_sent_and_failed(sender: Sender) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    account = sender.account(alice)
    good = sender.send(account, to=[_address(bob)])
    bad = sender.send(account, to=["x@elsewhere.example"])
    assert sender.delivery.run(good["outboundId"]) == "sent"
    assert sender.delivery.run(bad["outboundId"]) == "failed"
    sender.app.projections.catch_up()
    items = ok(sender.app.query("read-feed", {"limit": 1000}, ADMIN))["items"]
    outbound = [
        (i["type"], i["data"]["outboundId"]) for i in items if i["type"].startswith("outbound.")
    ]
    assert outbound == [
        ("outbound.queued", good["outboundId"]),
        ("outbound.queued", bad["outboundId"]),
        ("outbound.sent", good["outboundId"]),
        ("outbound.failed", bad["outboundId"]),
    ]
    failed_item = next(i for i in items if i["type"] == "outbound.failed")
    assert "554" in failed_item["data"]["reply"]
    listed = ok(sender.app.query("list-outbound", {"accountId": account}, ADMIN))["items"]
    assert {i["state"] for i in listed} == {"sent", "failed"}
    assert ok(sender.app.query("list-outbound", {}, STRANGER))["items"] == []


def test_xoauth2_submission_with_the_accounts_token(sender: Sender) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    # The private Dovecot takes the mailbox password as the XOAUTH2 token.
    dovecot, postfix = sender.servers.dovecot, sender.servers.postfix
    payload = {
        "provider": "imap",
        "displayName": "oauth",
        "address": f"{alice.name}@example.test",
        "scope": "shared",
        "authMethod": "xoauth2",
        "imap": {
            "host": dovecot.host,
            "port": dovecot.port,
            "security": "none",
            "username": alice.name,
        },
        "smtp": {
            "host": postfix.host,
            "port": postfix.submission_port,
            "security": "starttls",
            "username": alice.name,
        },
        "secret": alice.password,
    }
    account = ok(sender.app.write("connect-mail-account", payload, ADMIN))["accountId"]
    queued = sender.send(account, to=[_address(bob)], subject="By token")
    assert sender.delivery.run(queued["outboundId"]) == "sent"
    assert _wait_for(lambda: _raw_in(sender, bob, "INBOX"))


def test_a_message_of_an_inactive_account_waits_and_of_a_deleted_one_is_canceled(
    sender: Sender,
) -> None:
    account = sender.account(sender.mailbox())
    waiting = sender.send(account, to=["x@example.test"])["outboundId"]
    ok(sender.app.write("disconnect-mail-account", {"accountId": account}, ADMIN))
    assert sender.delivery.run(waiting) == "retrying"
    record = sender.outbound(waiting)
    assert (record["errorKind"], record["attempts"]) == ("account_not_active", 0)
    assert waiting not in sender.delivery.due(), "out of the due list until its next try"
    ok(sender.app.write("delete-mail-account", {"accountId": account}, ADMIN))
    other = sender.account(sender.mailbox())
    queued = sender.send(other, to=["x@example.test"])["outboundId"]
    ok(sender.app.write("delete-mail-account", {"accountId": other}, ADMIN))
    assert sender.delivery.run(queued) == "canceled"


def test_an_smtp_secret_of_its_own_is_used_for_sending(sender: Sender) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    dovecot, postfix = sender.servers.dovecot, sender.servers.postfix
    payload = {
        "provider": "imap",
        "displayName": "own smtp secret",
        "address": f"{alice.name}@example.test",
        "scope": "shared",
        "authMethod": "password",
        "imap": {
            "host": dovecot.host,
            "port": dovecot.port,
            "security": "none",
            "username": alice.name,
        },
        "smtp": {
            "host": postfix.host,
            "port": postfix.submission_port,
            "security": "starttls",
            "username": alice.name,
        },
        "secret": "not-the-password",  # the IMAP secret: SMTP must not need it
        "smtpSecret": alice.password,
    }
    without_smtp = {k: v for k, v in payload.items() if k != "smtp"}
    failed(sender.app.write("connect-mail-account", without_smtp, ADMIN), "invalid_payload", 400)
    account = ok(sender.app.write("connect-mail-account", payload, ADMIN))["accountId"]
    first = sender.send(account, to=[_address(bob)], subject="With its own secret")
    assert sender.delivery.run(first["outboundId"]) == "sent"
    ok(
        sender.app.write(
            "update-mail-account", {"accountId": account, "smtpSecret": "wrong"}, ADMIN
        )
    )
    second = sender.send(account, to=[_address(bob)], subject="With a wrong one")
    assert sender.delivery.run(second["outboundId"]) == "failed"
    assert "535" in sender.outbound(second["outboundId"])["lastReply"]
