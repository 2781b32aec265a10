"""The master key's check at start-up: the right key, or no start at all.

A store records a fingerprint of its master key when it is created: an HMAC of a
constant under the key, which proves possession and reveals nothing of the key. Every
start compares it with the key it was given; a different key would read every sealed
value as erased and wrap new tenant keys under the wrong key, so it is refused. A store
that has data is never given a freshly generated key when its key file is missing. A
store from before fingerprints gets one at its first start, after its key is shown to
unwrap one of its tenant keys.

Invariant: once a fingerprint row exists it never changes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from application.ports import SqlDatabase
from infrastructure.private_files import FILE_MODE, make_private_dir

log = logging.getLogger("tidings.crypto")

KEY_FILE = "master.key"
SETTING = "TIDINGS_MASTER_KEY"
FINGERPRINT_TABLE = "crypto_master"
_LABEL = b"tidings master key fingerprint v1"
_KEYS_TABLE = "crypto_keys"  # the KeyRing's table: tenant keys wrapped under the master key
_EVENTS_TABLE = "stored_events"


class MasterKeyError(Exception):
    """The master key cannot be used with this store; the message is one line for an
    operator and never holds key material."""


class MasterKeyMalformed(MasterKeyError, ValueError):
    pass


class MasterKeyMismatch(MasterKeyError):
    pass


class MasterKeyMissing(MasterKeyError):
    pass


def fingerprint(key: bytes) -> str:
    return hmac.new(key, _LABEL, hashlib.sha256).hexdigest()


def decode_key(text: str | bytes, source: str) -> bytes:
    """32 bytes from base64 text; ``source`` names where the text came from."""
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise MasterKeyMalformed(
            f"{source} must be the base64 encoding of 32 random bytes "
            "(44 characters, e.g. from `openssl rand -base64 32`)"
        )
    return key


def setup(db: SqlDatabase) -> None:
    with db.transaction() as cur:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {FINGERPRINT_TABLE} ("
            " id INTEGER PRIMARY KEY CHECK (id = 1), fingerprint TEXT NOT NULL)"
        )


def recorded(db: SqlDatabase) -> str | None:
    with db.reading() as cur:
        cur.execute(f"SELECT fingerprint FROM {FINGERPRINT_TABLE} WHERE id = 1")
        row = cur.fetchone()
    return None if row is None else str(row[0])


def has_events(db: SqlDatabase) -> bool:
    with db.reading() as cur:
        cur.execute(f"SELECT 1 FROM {_EVENTS_TABLE} LIMIT 1")
        return cur.fetchone() is not None


def has_data(db: SqlDatabase) -> bool:
    """Whether losing the key would lose data: a key was recorded, or events exist."""
    return recorded(db) is not None or has_events(db)


def _unwraps_a_tenant_key(db: SqlDatabase, key: bytes) -> bool | None:
    """Whether ``key`` opens one of the store's wrapped tenant keys (None: there is none)."""
    with db.reading() as cur:
        cur.execute(
            f"SELECT key_id, wrapped FROM {_KEYS_TABLE}"
            " WHERE key_id >= ? AND key_id < ? AND wrapped IS NOT NULL LIMIT 1",
            ("t.", "t/"),  # tenant keys: ids "t.<tenant>"
        )
        row = cur.fetchone()
    if row is None:
        return None
    sealed = base64.b64decode(row[1])
    try:
        AESGCM(key).decrypt(sealed[:12], sealed[12:], str(row[0]).encode())
    except (InvalidTag, ValueError):
        return False
    return True


def check(db: SqlDatabase, key: bytes, *, legacy_keys: bool) -> None:
    """Refuse ``key`` unless it is the store's; record it for a store that has none.
    ``legacy_keys``: the store may hold tenant keys from before fingerprints."""
    mine = fingerprint(key)
    stored = recorded(db)
    if stored is None:
        if legacy_keys and _unwraps_a_tenant_key(db, key) is False:
            raise MasterKeyMismatch(_mismatch())
        with db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {FINGERPRINT_TABLE} (id, fingerprint) VALUES (1, ?)"
                " ON CONFLICT (id) DO NOTHING",
                (mine,),
            )
        stored = recorded(db)
    if stored is None or not hmac.compare_digest(stored, mine):
        raise MasterKeyMismatch(_mismatch())


def _mismatch() -> str:
    return (
        f"{SETTING} is not the master key this store was created with; "
        "start with the store's own key (a wrong key would read its data as erased)"
    )


def load_master_key(configured: str | None, data_dir: Path, *, may_generate: bool) -> bytes:
    """The configured key, else the one in ``data_dir/master.key``; a missing file is
    generated (0600, with a warning) only when ``may_generate``."""
    if configured:
        return decode_key(configured, SETTING)
    path = data_dir / KEY_FILE
    if path.exists():
        return decode_key(path.read_bytes().strip(), f"the master key file {path}")
    if not may_generate:
        raise MasterKeyMissing(
            f"{SETTING} is not set and the master key file {path} is missing, but this "
            "store has data: restore the key file or set the store's key "
            "(a new key would make its data unreadable)"
        )
    make_private_dir(data_dir)
    key = AESGCM.generate_key(bit_length=256)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:  # another process generated it meanwhile: use theirs
        return decode_key(path.read_bytes().strip(), f"the master key file {path}")
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), FILE_MODE)
        file.write(base64.b64encode(key))
        file.flush()
        os.fsync(file.fileno())
    log.warning("generated a master key path=%s: set %s in production", path, SETTING)
    return key


def open_master_key(db: SqlDatabase, configured: str | None, data_dir: Path) -> bytes:
    """The checked master key: the configured one, else the key file in ``data_dir``,
    generated only for a store without data. Run under the store's set-up lock."""
    setup(db)
    events = has_events(db)
    with_data = events or recorded(db) is not None
    key = load_master_key(configured, data_dir, may_generate=not with_data)
    check(db, key, legacy_keys=events)
    return key
