"""The ``ingest-message`` handler: SystemAdmin only, exactly one event per
(account, providerMessageId), also when four threads race on one message."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from application import Result, User
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import (
    connect,
    count_events,
    messages,
)
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import failed, ok

INGESTED = "tidings.mail.MessageIngested"


def payload(account_id: str, provider_id: str = "emailid:M1", **extra: Any) -> dict[str, Any]:
    return {
        "accountId": account_id,
        "providerMessageId": provider_id,
        "messageIdHeader": "<m1@origin.example>",
        "references": [],
        "from": [{"name": "Ann", "address": "ann@origin.example"}],
        "to": [{"name": "", "address": "team@dest.example"}],
        "cc": [],
        "subject": "Hello from the operator",
        "snippet": "first words",
        "receivedAt": "2024-05-01T10:00:00+02:00",
        "bodyRef": None,
        "sizeBytes": 1234,
        "folder": "INBOX",
        **extra,
    }


def test_only_a_system_admin_ingests_and_duplicates_are_answered(
    mail: MailApp,
    admin: User,
    member: User,
    operator: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
) -> None:
    app = mail.app
    account_id = connect(app, admin, dovecot, mailbox)
    for caller in (admin, member):
        failed(app.write("ingest-message", payload(account_id), caller), "forbidden", 403)
    assert count_events(app, INGESTED) == 0

    first = ok(app.write("ingest-message", payload(account_id), operator))
    assert first["duplicate"] is False
    again = ok(app.write("ingest-message", payload(account_id, subject="changed"), operator))
    assert again == {"messageId": first["messageId"], "duplicate": True}
    assert count_events(app, INGESTED) == 1

    [item] = messages(app, admin)
    assert item["messageId"] == first["messageId"]
    assert item["subject"] == "Hello from the operator"
    assert item["from"] == [{"name": "Ann", "address": "ann@origin.example"}]
    assert item["receivedAt"] == "2024-05-01T08:00:00Z"
    assert item["sizeBytes"] == 1234 and item["state"] == "ok"

    failed(app.write("ingest-message", payload(str(uuid.uuid4())), operator), "not_found", 404)
    failed(app.write("ingest-message", payload("not-a-uuid"), operator), "not_found", 404)
    failed(app.write("ingest-message", {"accountId": account_id}, operator), "invalid_payload", 400)

    ok(app.write("disconnect-mail-account", {"accountId": account_id}, admin))
    failed(
        app.write("ingest-message", payload(account_id, "emailid:M2"), operator),
        "account_disconnected",
        422,
    )
    ok(app.write("delete-mail-account", {"accountId": account_id}, admin))
    failed(
        app.write("ingest-message", payload(account_id, "emailid:M3"), operator), "not_found", 404
    )
    assert count_events(app, INGESTED) == 1


def test_four_threads_racing_on_one_message_make_one_event(
    make_mail_app: MakeMailApp,
    admin: User,
    operator: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
) -> None:
    apps = [make_mail_app().app, make_mail_app().app]  # like two worker processes
    account_id = connect(apps[0], admin, dovecot, mailbox)
    for round_ in range(3):
        provider_id = f"emailid:race-{round_}"
        start = threading.Barrier(4)
        results: list[Result] = []
        lock = threading.Lock()

        def run(n: int, provider_id: str = provider_id, start: threading.Barrier = start) -> None:
            start.wait()
            result = apps[n % 2].write("ingest-message", payload(account_id, provider_id), operator)
            with lock:
                results.append(result)

        threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        datas = [ok(r) for r in results]
        assert len(datas) == 4
        assert sorted(d["duplicate"] for d in datas) == [False, True, True, True]
        assert len({d["messageId"] for d in datas}) == 1
    assert count_events(apps[0], INGESTED) == 3
    assert len(messages(apps[1], admin)) == 3


HOSTILE: list[tuple[str, Any]] = [
    ("receivedAt", "9999-12-31T23:59:59-23:59"),
    ("receivedAt", "0001-01-01T00:00:00+00:00"),
    ("receivedAt", "1969-12-31T23:59:59+00:00"),
    ("receivedAt", "2201-01-01T00:00:00+00:00"),
    ("receivedAt", "2024-05-01T10:00:00+23:00"),
    ("sizeBytes", 2**63),
    ("sizeBytes", 2**64 + 1),
    ("sizeBytes", 2**53 + 1),
    ("sizeBytes", -1),
    ("subject", "lone \ud800 surrogate"),
    ("providerMessageId", "emailid:\udfff"),
    ("snippet", "\udc80"),
    ("from", [{"name": "\ud83d", "address": "a@origin.example"}]),
    ("references", ["<r@x>"] * 1001),
]


def test_values_out_of_range_answer_invalid_payload_naming_the_field(
    mail: MailApp, admin: User, operator: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    app = mail.app
    account_id = connect(app, admin, dovecot, mailbox)
    for name, value in HOSTILE:
        result = app.write("ingest-message", payload(account_id, **{name: value}), operator)
        errors = failed(result, "invalid_payload", 400)["errors"]
        assert any(e["path"].split(".")[0] == name for e in errors), (name, errors)
    assert count_events(app, INGESTED) == 0
    edges: list[tuple[str, Any]] = [("receivedAt", "1970-01-01T00:00:00Z"), ("sizeBytes", 2**53)]
    for n, (name, value) in enumerate(edges):
        edge = payload(account_id, f"emailid:E{n}", **{name: value})
        ok(app.write("ingest-message", edge, operator))
    assert count_events(app, INGESTED) == 2
