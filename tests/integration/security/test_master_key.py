"""The master key is checked at start-up (``bootstrap()``, both backends).

A store records a keyed fingerprint of its key when created; another key is refused
naming TIDINGS_MASTER_KEY; a missing key file for a store with data is never
regenerated; a malformed key names the setting and the expected form; a store from
before fingerprints gets one at its first start, with its own key only.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from application import User
from application.app import App
from infrastructure.bootstrap import projection_runner
from infrastructure.crypto.master_key import (
    FINGERPRINT_TABLE,
    MasterKeyMalformed,
    MasterKeyMismatch,
    MasterKeyMissing,
)
from tests.support.results import ok


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def connect(app: App, admin: User) -> str:
    payload = {
        "provider": "imap",
        "displayName": "Sealed name",
        "address": "box@mailbox.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": "127.0.0.1", "port": 143, "security": "none", "username": "box"},
        "secret": "pw",
    }
    account_id: str = ok(app.write("connect-mail-account", payload, admin))["accountId"]
    return account_id


def display_names(app: App, admin: User) -> list[str]:
    app.projections.catch_up()
    items = ok(app.query("list-mail-accounts", {}, admin))["items"]
    return [item["displayName"] for item in items]


def forget_fingerprint(app: App) -> None:
    with projection_runner(app).db.transaction() as cur:
        cur.execute(f"DELETE FROM {FINGERPRINT_TABLE}")


def test_another_key_is_refused(make_app: Callable[..., App], admin: User) -> None:
    key = new_key()
    connect(make_app(master_key=key), admin)
    with pytest.raises(MasterKeyMismatch, match="TIDINGS_MASTER_KEY") as refused:
        make_app(master_key=new_key())
    assert key not in str(refused.value)
    assert display_names(make_app(master_key=key), admin) == ["Sealed name"]


def test_the_fingerprint_is_not_the_key(make_app: Callable[..., App]) -> None:
    key = new_key()
    app = make_app(master_key=key)
    with projection_runner(app).db.reading() as cur:
        cur.execute(f"SELECT fingerprint FROM {FINGERPRINT_TABLE}")
        [(stored,)] = cur.fetchall()
    raw = base64.b64decode(key)
    assert stored not in (key, raw.hex()) and raw.hex() not in stored and key not in stored


def test_a_lost_key_file_is_not_regenerated_for_a_store_with_data(
    make_app: Callable[..., App], admin: User, tmp_path: Path
) -> None:
    blobs = tmp_path / "blobs"
    connect(make_app(blob_dir=blobs), admin)  # no key configured: one is generated
    key_file = blobs / "master.key"
    saved = key_file.read_bytes()
    key_file.unlink()
    with pytest.raises(MasterKeyMissing) as refused:
        make_app(blob_dir=blobs)
    message = str(refused.value)
    assert "TIDINGS_MASTER_KEY" in message and str(key_file) in message
    assert not key_file.exists()
    # Restored, the store opens again with its data.
    key_file.write_bytes(saved)
    assert display_names(make_app(blob_dir=blobs), admin) == ["Sealed name"]


@pytest.mark.parametrize(
    "bad", ["not base64 at all!", base64.b64encode(bytes(range(16))).decode(), "QUJD"]
)
def test_a_malformed_key_names_the_setting_and_the_form(
    make_app: Callable[..., App], bad: str
) -> None:
    with pytest.raises(MasterKeyMalformed) as refused:
        make_app(master_key=bad)
    message = str(refused.value)
    assert "TIDINGS_MASTER_KEY" in message and "base64" in message and "32" in message
    assert bad not in message


def test_a_store_without_a_fingerprint_gets_one_with_its_own_key_only(
    make_app: Callable[..., App], admin: User
) -> None:
    key = new_key()
    app = make_app(master_key=key)
    connect(app, admin)
    forget_fingerprint(app)  # as a store from before fingerprints
    with pytest.raises(MasterKeyMismatch, match="TIDINGS_MASTER_KEY"):
        make_app(master_key=new_key())  # its tenant keys do not unwrap under this one
    upgraded = make_app(master_key=key)
    with projection_runner(upgraded).db.reading() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {FINGERPRINT_TABLE}")
        assert cur.fetchone()[0] == 1
    with pytest.raises(MasterKeyMismatch):
        make_app(master_key=new_key())
    assert display_names(upgraded, admin) == ["Sealed name"]
