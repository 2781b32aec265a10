"""Uploads on both backends, through the real Postfix and Dovecot: an uploaded file is
sent as an attachment and arrives byte for byte; the upload is gone once the message is
queued (the outbox holds the bytes), so its id cannot send it twice, while the same
request replayed answers the first outbound id; an upload is only usable from its own
account of its own tenant; past the limit nothing is kept; an expired upload is refused
and swept."""

from __future__ import annotations

import email
import email.policy
import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from application import User
from application.mail.outbound import uploads as uploads_module
from application.mail.outbound.uploads import UploadInterrupted, store_upload
from infrastructure.crypto.body_keys import BODY_KEYS_TABLE
from tests.integration.send.conftest import ADMIN, MakeSender, Sender
from tests.integration.send.test_send import _address, _raw_in, _wait_for
from tests.support.results import ok

PDF = os.urandom(300 * 1024)  # several chunks, and binary


def _chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _upload(sender: Sender, account_id: str, data: bytes = PDF, user: User = ADMIN) -> Any:
    return store_upload(
        sender.app.ctx,
        user,
        account_id=account_id,
        filename="report.pdf",
        content_type="application/pdf",
        chunks=_chunks(data),
    )


def _sealed_files(sender: Sender, account_id: str) -> list[Path]:
    root = Path(sender.mail.settings.blob_dir) / "accounts" / account_id
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def _body_keys(sender: Sender) -> int:
    """Body keys in the store (of every account: a test's own work is the only one)."""
    with sender.app.ctx.mail.blobs._body_keys.db.reading() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {BODY_KEYS_TABLE}")
        return int(cur.fetchone()[0])


def test_an_uploaded_file_is_sent_as_an_attachment_and_the_upload_is_then_gone(
    sender: Sender,
) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    alice_id = sender.account(alice)
    upload = ok(_upload(sender, alice_id))
    assert upload["size"] == len(PDF) and upload["contentType"] == "application/pdf"
    assert _sealed_files(sender, alice_id), "the upload is a sealed blob of the account"
    assert not any(PDF[:4096] in p.read_bytes() for p in _sealed_files(sender, alice_id))

    payload = {
        "to": [_address(bob)],
        "subject": "The report",
        "attachments": [{"uploadId": upload["uploadId"]}],
        "idempotencyKey": "report-1",
    }
    queued = sender.send(alice_id, **payload)
    assert sender.delivery.run(queued["outboundId"]) == "sent"
    [raw] = _wait_for(lambda: _raw_in(sender, bob, "INBOX"))
    message = email.message_from_bytes(raw, policy=email.policy.default)
    [part] = list(message.iter_attachments())
    assert part.get_filename() == "report.pdf"
    assert part.get_content_type() == "application/pdf"
    assert part.get_payload(decode=True) == PDF

    # The same request again is the same message (replayed), though the upload is gone.
    again = sender.send(alice_id, **payload)
    assert again["outboundId"] == queued["outboundId"] and again["replayed"] is True
    # The upload's id cannot send it twice: it was removed when the message was queued.
    other = sender.app.write(
        "send-message", {**payload, "accountId": alice_id, "idempotencyKey": "report-2"}, ADMIN
    )
    assert other.error is not None and other.error.status == 404


def test_an_upload_is_usable_only_from_its_own_account_of_its_own_tenant(
    sender: Sender,
) -> None:
    alice, bob = sender.mailbox(), sender.mailbox()
    alice_id, bob_id = sender.account(alice), sender.account(bob)
    upload = ok(_upload(sender, alice_id))
    attachment = {"uploadId": upload["uploadId"], "filename": "renamed.pdf"}
    base = {"to": [_address(alice)], "subject": "x", "attachments": [attachment]}
    # Another account of the same tenant: not found, as an unknown id is.
    refused = sender.app.write(
        "send-message", {**base, "accountId": bob_id, "idempotencyKey": "k1"}, ADMIN
    )
    assert refused.error is not None and refused.error.status == 404
    unknown = {**attachment, "uploadId": "0" * 32}
    refused = sender.app.write(
        "send-message",
        {**base, "attachments": [unknown], "accountId": alice_id, "idempotencyKey": "k2"},
        ADMIN,
    )
    assert refused.error is not None and refused.error.status == 404
    # Another tenant cannot store into the account, nor send from it.
    stranger = User(id="x", tenant_id="t-other", roles=frozenset({"TenantAdmin"}))
    assert _upload(sender, alice_id, user=stranger).error.status == 404
    refused = sender.app.write(
        "send-message", {**base, "accountId": alice_id, "idempotencyKey": "k3"}, stranger
    )
    assert refused.error is not None and refused.error.status == 404
    # The owner still can: the refusals used nothing up.
    queued = sender.send(alice_id, **{**base, "idempotencyKey": "k4"})
    assert sender.delivery.run(queued["outboundId"]) == "sent"


def test_an_upload_past_the_limit_is_413_and_leaves_nothing(make_sender: MakeSender) -> None:
    sender = make_sender(max_send_mb=0.25)  # 256 KiB
    alice = sender.mailbox()
    alice_id = sender.account(alice)
    before, keys = _sealed_files(sender, alice_id), _body_keys(sender)
    refused = _upload(sender, alice_id, os.urandom(300 * 1024))
    assert refused.error is not None and refused.error.status == 413
    assert refused.error.code == "upload_too_large"
    assert _sealed_files(sender, alice_id) == before, "the partial blob was removed"
    assert not list((Path(sender.mail.settings.blob_dir) / "tmp").iterdir())
    assert _body_keys(sender) == keys, "and its body key"
    assert ok(_upload(sender, alice_id, os.urandom(200 * 1024)))["size"] == 200 * 1024


def test_an_interrupted_upload_answers_its_reason_and_leaves_nothing(sender: Sender) -> None:
    alice = sender.mailbox()
    alice_id = sender.account(alice)
    keys = _body_keys(sender)

    def dripping() -> Iterator[bytes]:
        yield b"x" * 1000
        raise UploadInterrupted("request_timeout", 408, "the upload took too long to arrive")

    refused = store_upload(
        sender.app.ctx,
        ADMIN,
        account_id=alice_id,
        filename="a.bin",
        content_type="application/octet-stream",
        chunks=dripping(),
    )
    assert refused.error is not None and refused.error.status == 408
    assert _sealed_files(sender, alice_id) == []
    assert _body_keys(sender) == keys


def test_an_expired_upload_is_refused_and_swept(
    sender: Sender, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = sender.mailbox()
    alice_id = sender.account(alice)
    monkeypatch.setattr(uploads_module, "UPLOAD_LIFETIME", timedelta(seconds=-1))
    stale = ok(_upload(sender, alice_id))
    refused = sender.app.write(
        "send-message",
        {
            "accountId": alice_id,
            "to": [_address(alice)],
            "subject": "late",
            "attachments": [{"uploadId": stale["uploadId"]}],
            "idempotencyKey": "late",
        },
        ADMIN,
    )
    assert refused.error is not None and refused.error.status == 404
    monkeypatch.setattr(uploads_module, "UPLOAD_LIFETIME", timedelta(days=1))
    fresh = ok(_upload(sender, alice_id, b"fresh"))  # the next upload sweeps the stale one
    uploads = sender.app.ctx.mail.uploads
    assert uploads is not None
    assert uploads.get(stale["uploadId"]) is None
    assert uploads.get(fresh["uploadId"]) is not None
    assert len(_sealed_files(sender, alice_id)) == 1
