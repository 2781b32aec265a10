"""Secrets and personal data: never in plaintext in any table or log line; deleting an
account (or shredding its tenant) leaves its sealed values unreadable everywhere."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from application import User
from application.app import App
from infrastructure.blobs.filesystem import FilesystemBlobStore
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import (
    RECENT,
    accounts,
    connect,
    connect_payload,
    messages,
    raw_mail,
    threads,
)
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.dump import dump_database
from tests.support.results import failed, ok

TOKEN_PREFIX = "pii2:"


def sealed_tokens(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if value.startswith(TOKEN_PREFIX):
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from sealed_tokens(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from sealed_tokens(item)


def account_tokens(app: App, account_id: str) -> list[str]:
    """Every sealed value the event store holds for the account and its messages."""
    store: Any = app.ctx.store
    tokens: list[str] = []
    position = 0
    while batch := store.read(position, 1000):
        for recorded in batch:
            event = recorded.event
            payload = event.payload()
            if str(event.originator_id) == account_id or payload.get("account_id") == account_id:
                tokens.extend(sealed_tokens(payload))
        position = batch[-1].position
    return tokens


def test_no_secret_or_address_in_plaintext_in_any_table_or_log(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    app = mail.app
    box, locked = new_mailbox(), new_mailbox()
    marker = uuid.uuid4().hex[:10]
    senders = [f"private.sender{i}.{marker}@origin.example" for i in range(3)]
    subjects = [f"Confidential subject {i} {marker}" for i in range(3)]
    raws = [
        raw_mail(
            i,
            subject=subjects[i],
            sender=f"Private Person {marker} <{senders[i]}>",
            to=f"Recipient <recipient.{marker}@dest.example>",
            body=f"secret body text {marker}",
            message_id=f"<msgid.{i}.{marker}@origin.example>",
        )
        for i in range(3)
    ]
    dovecot.deliver(box, raws, internal_date=RECENT)
    address = f"owner.{marker}@mailbox.example"
    account_id = connect(app, admin, dovecot, box, verify=True, address=address)
    locked_id = connect(
        app, admin, dovecot, locked, secret="the-wrong-password-" + marker, address=f"x{address}"
    )
    failed(
        app.write(
            "connect-mail-account",
            connect_payload(dovecot, locked, verify=True, secret="nope-" + marker),
            admin,
        ),
        "mailbox_auth_failed",
        422,
    )
    ok(
        app.write(
            "update-mail-account", {"accountId": account_id, "secret": box.password + "2"}, admin
        )
    )
    ok(app.write("update-mail-account", {"accountId": account_id, "secret": box.password}, admin))
    outcomes = {o.account_id: o for o in mail.poll()}
    assert outcomes[account_id].ingested == 3 and outcomes[locked_id].error_kind == "auth"
    # The data is there for those allowed to see it.
    listed = messages(app, admin, accountId=account_id)
    assert sorted(m["subject"] for m in listed) == sorted(subjects)
    assert accounts(app, admin)[account_id]["imap"]["username"] == box.name

    forbidden = {
        "password": box.password,
        "other password": locked.password,
        "wrong password": "the-wrong-password-" + marker,
        "verify password": "nope-" + marker,
        "rotated password": box.password + "2",
        "address": address,
        "username": box.name,
        "other username": locked.name,
        "marker": marker,  # every sender, recipient, subject, body and Message-ID carries it
        "recipient": "recipient.",
    }
    rows = list(dump_database(database_url))
    tables = {table for table, _ in rows}
    assert {"stored_events", "mail_messages", "mail_accounts", "mail_secrets"} <= tables
    for table, text in rows:
        for what, value in forbidden.items():
            assert value not in text, f"{what} in plaintext in table {table}"

    # Raw MIME is sealed under the account key on disk, too.
    blob_files = [p for p in mail.app.ctx.mail.blobs.root.rglob("*") if p.is_file()]  # type: ignore[attr-defined]
    assert [p for p in blob_files if "packs" in p.parts]  # the three bodies are on disk
    for path in blob_files:
        data = path.read_bytes()
        assert marker.encode() not in data, f"plaintext mail in blob {path.name}"

    records = [r for r in caplog.records]
    assert any(r.name.startswith("imapclient") for r in records), "imapclient logs not captured"
    for record in records:
        line = record.getMessage() + repr(record.args) + str(record.exc_info or "")
        for what, value in forbidden.items():
            assert value not in line, f"{what} in log record {record.name}: {line}"
    auth_lines = [r.getMessage() for r in records if "sync.failed" in r.getMessage()]
    assert any(locked_id in line and "MailboxAuthError" in line for line in auth_lines)


def test_deleting_an_account_shreds_it_and_its_messages(
    make_mail_app: MakeMailApp,
    admin: User,
    tenant: str,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    mail = make_mail_app()
    app = mail.app
    doomed_box, kept_box = new_mailbox(), new_mailbox()
    dovecot.deliver(doomed_box, [raw_mail(i, subject=f"doomed {i}") for i in range(3)])
    dovecot.deliver(kept_box, [raw_mail(10 + i, subject=f"kept {i}") for i in range(2)])
    doomed = connect(app, admin, dovecot, doomed_box)
    kept = connect(app, admin, dovecot, kept_box)
    ok(app.write("update-mail-account", {"accountId": doomed, "displayName": "Doomed"}, admin))
    mail.poll()
    doomed_messages = messages(app, admin, accountId=doomed)
    assert len(doomed_messages) == 3 and len(threads(app, admin)) == 5
    tokens = account_tokens(app, doomed)
    assert len(tokens) >= 3 * 7 + 3
    assert all(app.ctx.mail.cipher.reveal(t, tenant, doomed) is not None for t in tokens)

    stored = [app.ctx.mail.read_model.message(m["messageId"]) for m in doomed_messages]
    blob_refs = [row["bodyRef"] for row in stored if row is not None]
    assert len(blob_refs) == len(doomed_messages)
    assert all(filesystem_blobs(app).exists(ref) for ref in blob_refs)

    # Any spelling of the id the handlers accept deletes the right key.
    ok(app.write("delete-mail-account", {"accountId": doomed.upper()}, admin))
    assert not any(filesystem_blobs(app).exists(ref) for ref in blob_refs)
    assert doomed not in accounts(app, admin)
    assert {m["accountId"] for m in messages(app, admin)} == {kept}
    assert {t["accountId"] for t in threads(app, admin)} == {kept}
    for message in doomed_messages:
        failed(
            app.query("get-message", {"messageId": message["messageId"]}, admin), "not_found", 404
        )
    failed(app.query("list-messages", {"accountId": doomed}, admin), "not_found", 404)
    assert all(app.ctx.mail.cipher.reveal(t, tenant, doomed) is None for t in tokens)
    assert app.ctx.mail.secrets.get(doomed) is None
    assert app.ctx.mail.state.cursor(doomed) is None
    # Another process (its own key cache) cannot read them either.
    fresh = make_mail_app().app
    assert all(fresh.ctx.mail.cipher.reveal(t, tenant, doomed) is None for t in tokens)
    kept_tokens = account_tokens(app, kept)
    assert all(app.ctx.mail.cipher.reveal(t, tenant, kept) is not None for t in kept_tokens)
    assert sorted(m["subject"] for m in messages(app, admin)) == ["kept 0", "kept 1"]

    # Shredding the tenant makes its remaining account unreadable too, nobody else's.
    outsider = User(id="o", tenant_id="t-" + uuid.uuid4().hex[:8], roles=frozenset({"TenantAdmin"}))
    outsider_box = new_mailbox()
    outsider_id = connect(app, outsider, dovecot, outsider_box)
    app.ctx.mail.cipher.shred_tenant(tenant)
    assert all(app.ctx.mail.cipher.reveal(t, tenant, kept) is None for t in kept_tokens)
    assert app.ctx.mail.secrets.get(kept) is None
    listed = accounts(app, admin)[kept]
    assert listed["address"] == listed["displayName"] == listed["imap"]["username"] == "[erased]"
    assert all(m["from"] == [] for m in messages(app, admin))
    assert all(app.ctx.mail.cipher.reveal(t, outsider.tenant_id, outsider_id) is not None
        for t in account_tokens(app, outsider_id))
    assert accounts(app, outsider)[outsider_id]["imap"]["username"] == outsider_box.name


def filesystem_blobs(app: App) -> FilesystemBlobStore:
    blobs = app.ctx.mail.blobs
    assert isinstance(blobs, FilesystemBlobStore)
    return blobs
