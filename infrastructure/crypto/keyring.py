"""Envelope encryption for personal data and secrets (AES-256-GCM).

Key hierarchy: master key (never stored in the database) wraps one key per tenant;
a tenant key wraps one key per mail account. Tokens name the key that sealed them:
``pii1:<key id>:<base64 nonce+ciphertext>``, the key id being the additional data.

Shredding replaces a key's wrapped bytes with a tombstone in one statement: every
token under it, in events, read models and blobs, is unreadable from then on, and a
shredded key is never re-created. Unwrapped keys are cached: for reading for
``cache_seconds``, so another process's shred takes effect here within that time; for
sealing for ``seal_cache_seconds`` (minutes: sealing with a key shredded meanwhile only
makes data nobody can read, and a burst of new mail in thousands of accounts must not
cost a key lookup per account).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from application.ports import SqlDatabase
from application.privacy import KeyErased
from infrastructure.crypto.randomness import random_bytes

log = logging.getLogger("tidings.crypto")

TOKEN_PREFIX = "pii1"  # noqa: S105 - a format tag, not a secret
KEYS_TABLE = "crypto_keys"


class KeyShredded(KeyErased):
    """Sealing under a key that was shredded (its account or tenant was erased)."""


def _seal(key: bytes | AESGCM, aad: str, plaintext: bytes) -> bytes:
    aead = key if isinstance(key, AESGCM) else AESGCM(key)
    nonce = random_bytes(12)
    return nonce + aead.encrypt(nonce, plaintext, aad.encode())


def _open(key: bytes, aad: str, sealed: bytes) -> bytes:
    return AESGCM(key).decrypt(sealed[:12], sealed[12:], aad.encode())


class KeyRing:
    """Implements ``PiiCipher``."""

    def __init__(
        self,
        db: SqlDatabase,
        master_key: bytes,
        cache_seconds: float = 10.0,
        seal_cache_seconds: float = 600.0,
    ) -> None:
        self.db = db
        self._master = master_key
        self._cache: dict[str, tuple[float, bytes | None]] = {}  # key id -> (fetched, key)
        self._cache_seconds = cache_seconds
        self._seal_cache_seconds = seal_cache_seconds
        self._lock = threading.Lock()

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {KEYS_TABLE} (key_id TEXT PRIMARY KEY,"
                " wrapped TEXT)"  # NULL wrapped = shredded
            )

    # --- keys ---------------------------------------------------------------------

    def _key(self, key_id: str, parent: tuple[str, bytes] | None, create: bool) -> bytes | None:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key_id)
        max_age = self._seal_cache_seconds if create else self._cache_seconds
        if cached is not None and now - cached[0] < max_age:
            return cached[1]
        wrapping_id, wrapping = parent if parent is not None else ("master", self._master)
        with self.db.reading() as cur:
            cur.execute(f"SELECT wrapped FROM {KEYS_TABLE} WHERE key_id = ?", (key_id,))
            row = cur.fetchone()
        if row is None and create:
            fresh = _seal(wrapping, key_id, AESGCM.generate_key(bit_length=256))
            with self.db.transaction() as cur:
                cur.execute(
                    f"INSERT INTO {KEYS_TABLE} (key_id, wrapped) VALUES (?, ?)"
                    " ON CONFLICT (key_id) DO NOTHING",
                    (key_id, base64.b64encode(fresh).decode()),
                )
                cur.execute(f"SELECT wrapped FROM {KEYS_TABLE} WHERE key_id = ?", (key_id,))
                row = cur.fetchone()
        key: bytes | None = None
        if row is not None and row[0] is not None:
            try:
                key = _open(wrapping, key_id, base64.b64decode(row[0]))
            except InvalidTag:
                log.error("key does not unwrap key_id=%s wrapping=%s", key_id, wrapping_id)
                key = None
        if row is not None:  # a missing key is not remembered: sealing creates it
            with self._lock:
                self._cache[key_id] = (now, key)
        return key

    @staticmethod
    def _tenant_key_id(tenant_id: str) -> str:
        return f"t.{tenant_id}"

    @staticmethod
    def _account_key_id(account_id: str) -> str:
        return f"a.{account_id}"

    def _chain(self, tenant_id: str, account_id: str | None, create: bool) -> tuple[str, bytes]:
        tenant_key_id = self._tenant_key_id(tenant_id)
        tenant_key = self._key(tenant_key_id, None, create)
        if tenant_key is None:
            raise KeyShredded(tenant_key_id)
        if account_id is None:
            return tenant_key_id, tenant_key
        account_key_id = f"{self._account_key_id(account_id)}@{tenant_id}"
        account_key = self._key(account_key_id, (tenant_key_id, tenant_key), create)
        if account_key is None:
            raise KeyShredded(account_key_id)
        return account_key_id, account_key

    def account_key(self, tenant_id: str, account_id: str, *, sealing: bool = False) -> bytes:
        """The account's own key (sealed blobs); raises ``KeyErased`` once shredded.
        ``sealing``: to seal with (created when missing, cached longer)."""
        return self._chain(tenant_id, account_id, create=sealing)[1]

    # --- PiiCipher ----------------------------------------------------------------

    def seal(self, tenant_id: str, account_id: str | None, plaintext: str) -> str:
        return self.sealer(tenant_id, account_id)(plaintext)

    def sealer(self, tenant_id: str, account_id: str | None) -> Callable[[str], str]:
        key_id, key = self._chain(tenant_id, account_id, create=True)
        aead, prefix = AESGCM(key), f"{TOKEN_PREFIX}:{key_id}:"

        def seal(plaintext: str) -> str:
            return prefix + base64.b64encode(_seal(aead, key_id, plaintext.encode())).decode()

        return seal

    def reveal(self, token: str) -> str | None:
        try:
            prefix, rest = token.split(":", 1)
            key_id, sealed = rest.rsplit(":", 1)
        except ValueError:
            return None
        if prefix != TOKEN_PREFIX:
            return None
        if key_id.startswith("a."):
            account_part, _, tenant_id = key_id.partition("@")
            account_id: str | None = account_part[2:]
        else:
            tenant_id, account_id = key_id[2:], None
        try:
            _, key = self._chain(tenant_id, account_id, create=False)
            return _open(key, key_id, base64.b64decode(sealed)).decode()
        except (KeyShredded, InvalidTag, ValueError):
            return None

    def _shred(self, key_id: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {KEYS_TABLE} (key_id, wrapped) VALUES (?, NULL)"
                " ON CONFLICT (key_id) DO UPDATE SET wrapped = NULL",
                (key_id,),
            )
        with self._lock:
            self._cache[key_id] = (float("inf"), None)  # shredded here: for good

    def shred_account(self, tenant_id: str, account_id: str) -> None:
        self._shred(f"{self._account_key_id(account_id)}@{tenant_id}")

    def shred_tenant(self, tenant_id: str) -> None:
        self._shred(self._tenant_key_id(tenant_id))
