"""Crypto-shredding of one erased body, on both backends: each body has a key of its own
(blob and snippet sealed under it), and the sweep destroys that key before recording the
erasure. A copy of the blob directory and an event export taken before the sweep are
unreadable after it, while the account's other bodies and the erased message's metadata
still read; a rebuild gives the same rows; a sweep killed between destroying the key and
recording the event records it once at its next run."""

from __future__ import annotations

import io
import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from application import User
from application.mail.ports import BlobNotFound, BlobOwner
from application.privacy import KeyErased
from domain.message import MessageIngested
from domain.message_retention import MessageBodyErased
from infrastructure import bootstrap as wiring
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.crypto.body_keys import BODY_KEYS_TABLE, BodyKeys
from infrastructure.crypto.keyring import KeyRing
from infrastructure.crypto.master_key import open_master_key
from infrastructure.eventstore.jsonl import export_events
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import count_events, messages
from tests.integration.mail.test_mail_retention import NOW, message, rows, seeded, sweep
from tests.integration.retention.support import MovingClock
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.dump import dump_database


@pytest.fixture
def clock() -> MovingClock:
    return MovingClock(NOW)


def _seeded(
    mail: MailApp, admin: User, dovecot: DovecotServer, box: DovecotUser, clock: MovingClock
) -> dict[str, dict[str, Any]]:
    found = seeded(mail, admin, dovecot, box, clock)
    return {subject: {**m, "tenantId": admin.tenant_id} for subject, m in found.items()}


def _export(app: Any) -> list[dict[str, Any]]:
    out = io.StringIO()
    export_events(wiring.event_store(app), out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _ingested(export: list[dict[str, Any]], message_id: str) -> dict[str, Any]:
    [state] = [
        line["state"]
        for line in export
        if line["topic"] == MessageIngested.TOPIC and line["originatorId"] == message_id
    ]
    return state  # type: ignore[no-any-return]


def _read(blobs: FilesystemBlobStore, found: dict[str, Any]) -> bytes:
    owner = BlobOwner(found["tenantId"], found["accountId"])
    with blobs.open(found["bodyRef"], owner=owner) as blob:
        return blob.read()


def _backup(app: Any, to: Path) -> FilesystemBlobStore:
    """A copy of the blob directory, read with the live keys (as a restore would)."""
    keys: KeyRing = app.ctx.mail.cipher
    shutil.copytree(app.ctx.mail.blobs.root, to)
    return FilesystemBlobStore(to, account_key=keys.account_key, body_keys=keys.bodies)


def _live_root(app: Any) -> Path:
    """The live blob directory."""
    root: Path = app.ctx.mail.blobs.root
    return root


def _reveal(app: Any, token: str, found: dict[str, Any]) -> str | None:
    cipher: KeyRing = app.ctx.mail.cipher
    return cipher.reveal(token, found["tenantId"], found["accountId"])


def test_an_erased_body_is_unreadable_in_a_backup_and_an_export_taken_before(
    mail: MailApp,
    make_mail_app: MakeMailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    clock: MovingClock,
    database_url: str,
    tmp_path: Path,
) -> None:
    app = mail.app
    by_subject = _seeded(mail, admin, dovecot, mailbox, clock)
    old, new = by_subject["old"], by_subject["new"]
    assert old["bodyRef"].startswith("pack3:")  # a key of its own
    backup = _backup(app, tmp_path / "backup")
    export = _export(app)
    old_event, new_event = _ingested(export, old["messageId"]), _ingested(export, new["messageId"])
    # Before the sweep both copies read: the checks below can fail.
    assert b"secret-old-body" in _read(backup, old)
    assert "secret-old-body" in (_reveal(app, old_event["snippet"], old) or "")
    assert old_event["snippet"].startswith("pii2:b.")

    clock.move(days=20)  # old: 30 days, due; new: 22 days
    assert sweep(app) == 1

    for reader in (app, make_mail_app().app):  # this process, and a fresh key cache
        with pytest.raises(BlobNotFound):
            _read(_backup(reader, tmp_path / f"again-{id(reader)}"), old)
        assert _reveal(reader, old_event["snippet"], old) is None
        # The account's other body and the erased message's metadata still read.
        assert b"secret-new-body" in _read(backup, new)
        assert "secret-new-body" in (_reveal(reader, new_event["snippet"], new) or "")
        assert _reveal(reader, old_event["subject"], old) == "old"
        erased = message(reader, admin, old["messageId"])
        assert erased["bodyErased"] and erased["subject"] == "old" and erased["raw"] is None
    with pytest.raises(BlobNotFound):
        _read(backup, old)
    # No plaintext of the erased body in the store or the live blobs.
    for _, text in dump_database(database_url):
        assert "secret-old-body" not in text
    for path in _live_root(app).rglob("*"):
        if path.is_file():
            assert b"secret-old-body" not in path.read_bytes()

    settled = rows(app)
    app.projections.rebuild()
    assert rows(app) == settled
    listed = {m["messageId"]: m for m in messages(app, admin)}
    assert listed[old["messageId"]]["subject"] == "old"
    assert listed[old["messageId"]]["snippet"] == ""
    assert "secret-new-body" in listed[new["messageId"]]["snippet"]


def test_a_sweep_killed_after_destroying_the_key_records_the_erasure_once(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    clock: MovingClock,
    tmp_path: Path,
) -> None:
    app = mail.app
    old = _seeded(mail, admin, dovecot, mailbox, clock)["old"]
    backup = _backup(app, tmp_path / "backup")
    snippet = _ingested(_export(app), old["messageId"])["snippet"]
    clock.move(days=20)
    real_append = app.ctx.store.append

    def dies(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # the process dies after the key, before its event

    app.ctx.store.append = dies  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        sweep(app)
    app.ctx.store.append = real_append  # type: ignore[method-assign]
    # The key is gone already: nothing reads the body, though the log does not say so yet.
    assert count_events(app, MessageBodyErased.TOPIC) == 0
    with pytest.raises(BlobNotFound):
        _read(backup, old)
    assert _reveal(app, snippet, old) is None
    between = message(app, admin, old["messageId"])
    assert between["raw"] is None and between["text"] is None and not between["bodyErased"]
    assert between["subject"] == "old"
    # The next run finds it still due and records it, once.
    assert sweep(app) == 1
    assert sweep(app) == 0
    assert count_events(app, MessageBodyErased.TOPIC) == 1
    assert message(app, admin, old["messageId"])["bodyErased"]


def test_a_body_key_opens_only_for_its_own_account(mail: MailApp, tmp_path: Path) -> None:
    keys: KeyRing = mail.app.ctx.mail.cipher  # type: ignore[assignment]
    blobs: FilesystemBlobStore = mail.app.ctx.mail.blobs  # type: ignore[assignment]
    tenant, account, other = "t-" + uuid.uuid4().hex[:8], str(uuid.uuid4()), str(uuid.uuid4())
    owner, intruder = BlobOwner(tenant, account), BlobOwner(tenant, other)
    [ref, its_ref] = blobs.put_packed([(owner, b"a private body"), (intruder, b"its own")])
    assert ref is not None and its_ref is not None
    token = keys.body_sealer(tenant, account, ref)("a private snippet")
    assert token.startswith("pii2:b.") and f"@{account}@{tenant}:" in token
    assert keys.reveal(token, tenant, account) == "a private snippet"
    assert keys.reveal(token, tenant, other) is None
    assert keys.reveal(token, "t-else", account) is None
    assert keys.reveal(token, tenant, account, "secret") is None
    # A token whose key id is rewritten to another account's body key does not open.
    its_name = its_ref.split(":")[3]
    forged = token.replace(token.split(":")[1], f"b.{its_name}@{other}@{tenant}")
    assert keys.reveal(forged, tenant, other) is None
    # Sealing against another account's body seals under the sealer's own account key.
    assert keys.body_sealer(tenant, other, ref)("x").startswith(f"pii2:a.{other}@{tenant}:")
    # A wrapped key copied to another key id does not unwrap.
    name = ref.split(":")[3]
    with keys.db.transaction() as cur:
        cur.execute(
            f"UPDATE {BODY_KEYS_TABLE} SET wrapped = (SELECT wrapped FROM {BODY_KEYS_TABLE}"
            " WHERE key_id = ?) WHERE key_id = ?",
            (f"b.{name}@{account}@{tenant}", f"b.{its_name}@{other}@{tenant}"),
        )
    fresh = BodyKeys(keys.db, keys.account_key, cache_seconds=0.0)  # nothing remembered
    with pytest.raises(BlobNotFound):
        FilesystemBlobStore(blobs.root, keys.account_key, fresh).open(its_ref)
    # A ref is opened and destroyed only for the owner it names.
    with pytest.raises(BlobNotFound):
        blobs.open(ref, owner=intruder)
    blobs.delete_many([(intruder, ref)])
    with blobs.open(ref, owner=owner) as blob:
        assert blob.read() == b"a private body"
    blobs.delete_many([(owner, ref)])
    assert not blobs.exists(ref)
    with pytest.raises(BlobNotFound):
        blobs.open(ref, owner=owner)
    # A shredded account takes its bodies' keys with it.
    streamed = blobs.put_stream([b"streamed ", b"body"], owner=owner)
    assert streamed.startswith("body1:") and blobs.exists(streamed)
    keys.shred_account(tenant, account)
    with pytest.raises(BlobNotFound):
        blobs.open(streamed, owner=owner)


def test_a_shred_shows_at_once_to_reading_and_to_a_sealing_reveal_within_the_sealers_time(
    mail: MailApp,
) -> None:
    """Another process's shred: a reveal for reading sees it as soon as its key's cache
    lapses; a reveal that only steers sealing (``sealing=True``) takes the key as the
    sealer holds it, so it sees the shred once the sealer's cache lapses, as sealing does."""
    keys: KeyRing = mail.app.ctx.mail.cipher  # type: ignore[assignment]
    configured = mail.settings.master_key
    assert configured is not None
    master = open_master_key(keys.db, configured.get_secret_value(), mail.settings.blob_dir)
    tenant, account = "t-" + uuid.uuid4().hex[:8], str(uuid.uuid4())
    sealing_long = KeyRing(keys.db, master, cache_seconds=0.0, seal_cache_seconds=600.0)
    sealing_never = KeyRing(keys.db, master, cache_seconds=0.0, seal_cache_seconds=0.0)
    token = sealing_long.seal(tenant, account, "me@example.org")
    for ring in (sealing_long, sealing_never):
        assert ring.reveal(token, tenant, account, sealing=True) == "me@example.org"
    keys.shred_account(tenant, account)
    assert sealing_long.reveal(token, tenant, account, sealing=True) == "me@example.org"
    assert sealing_never.reveal(token, tenant, account, sealing=True) is None
    assert sealing_long.reveal(token, tenant, account) is None  # read again: shredded
    assert sealing_long.reveal(token, tenant, account, sealing=True) is None  # known now
    with pytest.raises(KeyErased):
        sealing_never.sealer(tenant, account)
