"""Sealed data is bound to its owner: a token copied into another tenant's row, or a
``bodyRef`` naming another tenant's blob, yields nothing; data sealed by the previous
formats (``pii1`` tokens, ``TDB1`` blobs) still reads for its own owner."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from application import SYSTEM_TENANT_ID, User
from application.mail.ports import BlobNotFound, BlobOwner
from infrastructure.crypto.keyring import KeyRing
from infrastructure.crypto.sealed_blobs import mac_key
from projections.mail import TABLES as MAIL_TABLES
from tests.integration.mail.conftest import MailApp
from tests.integration.mail.helpers import accounts, connect, messages, raw_mail
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok

OPERATOR = User(id="operator", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))


def _keys(mail: MailApp) -> KeyRing:
    keys = mail.app.ctx.mail.cipher
    assert isinstance(keys, KeyRing)
    return keys


def test_a_token_opens_only_for_its_owner_and_purpose(mail: MailApp) -> None:
    keys = _keys(mail)
    tenant, other = "t-" + uuid.uuid4().hex[:8], "t-" + uuid.uuid4().hex[:8]
    account, other_account = str(uuid.uuid4()), str(uuid.uuid4())
    token = keys.seal(tenant, account, "private subject")
    assert token.startswith("pii2:") and "private" not in token
    assert keys.reveal(token, tenant, account) == "private subject"
    assert keys.reveal(token, other, account) is None
    assert keys.reveal(token, tenant, other_account) is None
    assert keys.reveal(token, tenant, None) is None
    assert keys.reveal(token, tenant, account, "secret") is None
    # A token whose key id is rewritten to the reader's own key does not authenticate.
    keys.seal(other, account, "x")  # the other tenant has keys of its own
    forged = token.replace(f"@{tenant}:", f"@{other}:")
    assert forged != token and keys.reveal(forged, other, account) is None
    tenant_token = keys.seal(tenant, None, "a tenant value", "field")
    assert keys.reveal(tenant_token, tenant, None, "field") == "a tenant value"
    assert keys.reveal(tenant_token, other, None, "field") is None
    assert keys.reveal(tenant_token, tenant, None, "pii") is None


def test_a_legacy_pii1_token_reads_for_its_owner_only(mail: MailApp) -> None:
    keys = _keys(mail)
    tenant, other = "t-" + uuid.uuid4().hex[:8], "t-" + uuid.uuid4().hex[:8]
    account = str(uuid.uuid4())
    key = keys.account_key(tenant, account, sealing=True)
    key_id = f"a.{account}@{tenant}"
    nonce = os.urandom(12)
    sealed = nonce + AESGCM(key).encrypt(nonce, b"written by the old code", key_id.encode())
    legacy = f"pii1:{key_id}:{base64.b64encode(sealed).decode()}"  # the previous format
    assert keys.reveal(legacy, tenant, account) == "written by the old code"
    assert keys.reveal(legacy, other, account) is None
    assert keys.reveal(legacy, tenant, str(uuid.uuid4())) is None


def _legacy_tdb1(key: bytes, data: bytes) -> tuple[bytes, str]:
    """A blob file as the previous code sealed it (one segment), and its digest."""
    file_id = os.urandom(16)
    nonce = os.urandom(12)
    sealed = AESGCM(key).encrypt(nonce, data, file_id + struct.pack(">Q?", 0, True))
    digest = hmac.new(mac_key(key), data, hashlib.sha256).hexdigest()
    return b"TDB1" + file_id + struct.pack(">I", len(sealed)) + nonce + sealed, digest


def test_a_legacy_tdb1_blob_still_reads_for_its_owner(mail: MailApp) -> None:
    keys, blobs = _keys(mail), mail.app.ctx.mail.blobs
    owner = BlobOwner("t-" + uuid.uuid4().hex[:8], str(uuid.uuid4()))
    data = b"Subject: old\r\n\r\nsealed before owners were bound\r\n"
    content, digest = _legacy_tdb1(
        keys.account_key(owner.tenant_id, owner.account_id, sealing=True), data
    )
    ref = f"acct1:{base64.urlsafe_b64encode(owner.tenant_id.encode()).decode().rstrip('=')}"
    ref += f":{owner.account_id}:{digest}"
    path = blobs.path_of(ref)  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    with blobs.open(ref, owner=owner) as blob:
        assert blob.read() == data
    stranger = BlobOwner("t-" + uuid.uuid4().hex[:8], owner.account_id)
    try:
        blobs.open(ref, owner=stranger)
    except BlobNotFound:
        pass
    else:
        raise AssertionError("a legacy blob opened for another tenant")


def test_tokens_copied_into_another_tenants_rows_read_as_erased(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    app = mail.app
    victim_box, attacker_box = new_mailbox(), new_mailbox()
    dovecot.deliver(victim_box, [raw_mail(1, subject="the victim's secret subject")])
    victim = connect(app, admin, dovecot, victim_box, address="victim@mail.example")
    attacker_user = User(
        id="a", tenant_id="t-" + uuid.uuid4().hex[:8], roles=frozenset({"TenantAdmin"})
    )
    attacker = connect(app, attacker_user, dovecot, attacker_box, address="me@mail.example")
    mail.poll()
    dovecot.deliver(attacker_box, [raw_mail(2, subject="the attacker's own")])
    mail.poll()
    [victim_message] = messages(app, admin, accountId=victim)
    [attacker_message] = messages(app, attacker_user, accountId=attacker)

    db = app.ctx.mail.read_model.db  # type: ignore[attr-defined]
    accounts_table, messages_table = MAIL_TABLES["accounts"], MAIL_TABLES["messages"]
    with db.transaction() as cur:
        cur.execute(
            f"SELECT address, display_name FROM {accounts_table} WHERE account_id = ?", (victim,)
        )
        address, display_name = cur.fetchone()
        cur.execute(
            f"UPDATE {accounts_table} SET address = ?, display_name = ? WHERE account_id = ?",
            (address, display_name, attacker),
        )
        cur.execute(
            f"SELECT subject, sender FROM {messages_table} WHERE message_id = ?",
            (victim_message["messageId"],),
        )
        subject, sender = cur.fetchone()
        cur.execute(
            f"UPDATE {messages_table} SET subject = ?, sender = ? WHERE message_id = ?",
            (subject, sender, attacker_message["messageId"]),
        )
    listed = accounts(app, attacker_user)[attacker]
    assert listed["address"] == listed["displayName"] == "[erased]"
    [moved] = messages(app, attacker_user, accountId=attacker)
    assert moved["subject"] is None and moved["from"] == []
    # The victim still reads its own.
    assert accounts(app, admin)[victim]["address"] == "victim@mail.example"
    assert messages(app, admin, accountId=victim)[0]["subject"] == "the victim's secret subject"


def test_a_forged_body_ref_to_another_tenants_blob_yields_nothing(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    new_mailbox: Callable[[], DovecotUser],
) -> None:
    app = mail.app
    victim_box, attacker_box = new_mailbox(), new_mailbox()
    dovecot.deliver(victim_box, [raw_mail(1, body="the victim's private body")])
    victim = connect(app, admin, dovecot, victim_box)
    attacker_user = User(
        id="a", tenant_id="t-" + uuid.uuid4().hex[:8], roles=frozenset({"TenantAdmin"})
    )
    attacker = connect(app, attacker_user, dovecot, attacker_box)
    mail.poll()
    [victim_message] = messages(app, admin, accountId=victim)
    victim_ref = app.ctx.mail.read_model.message(victim_message["messageId"])["bodyRef"]  # type: ignore[index]
    own = ok(app.query("get-message", {"messageId": victim_message["messageId"]}, admin))
    assert b"the victim's private body" in base64.b64decode(own["raw"])

    # A message in the attacker's account whose bodyRef names the victim's blob.
    forged = ok(
        app.write(
            "ingest-message",
            {
                "accountId": attacker,
                "providerMessageId": "forged-1",
                "receivedAt": datetime.now(UTC).isoformat(),
                "sizeBytes": 10,
                "bodyRef": victim_ref,
            },
            OPERATOR,
        )
    )
    app.projections.catch_up()
    answer = ok(app.query("get-message", {"messageId": forged["messageId"]}, attacker_user))
    assert answer["raw"] is None
    # The ref rewritten to name the attacker's account points at a file sealed for the
    # victim: it does not open either.
    kind, _, account_id, *rest = victim_ref.split(":")
    tenant_part = base64.urlsafe_b64encode(attacker_user.tenant_id.encode()).decode().rstrip("=")
    renamed = ":".join([kind, tenant_part, attacker, *rest])
    forged_again = ok(
        app.write(
            "ingest-message",
            {
                "accountId": attacker,
                "providerMessageId": "forged-2",
                "receivedAt": datetime.now(UTC).isoformat(),
                "sizeBytes": 10,
                "bodyRef": renamed,
            },
            OPERATOR,
        )
    )
    app.projections.catch_up()
    answer = ok(app.query("get-message", {"messageId": forged_again["messageId"]}, attacker_user))
    assert answer["raw"] is None
    assert account_id == victim and renamed != victim_ref
