"""Envelope encryption for personal data and secrets (AES-256-GCM).

Key hierarchy: master key (never stored in the database) wraps one key per tenant;
a tenant key wraps one key per mail account. Tokens name the key that sealed them:
``pii2:<key id>:<base64 nonce+ciphertext>``. The additional data is the format tag, the
key id (which names the tenant, and the account for account keys) and the purpose (what
the value is: ``pii``, ``secret``, a custom field's entity and key), so a token opens only
where it was sealed for: ``reveal`` takes the owner the reader expects, and a token
copied into another tenant's event or row, or into another field, answers None.

``pii1:`` tokens (additional data: the key id alone) are still opened, for stores written
before the purpose was bound. Reading them stays safe because ``reveal`` refuses a token
whose key id is not the expected owner's before decrypting: a ``pii1`` token moved to
another tenant or account names a key that is not the reader's, and answers None. Only a
move between purposes of the same owner goes unnoticed for them, which shows that owner
its own data.

Each stored body has a key of its own under the account key (``body_keys``): its blob
and its snippet are sealed under it, so erasing one body destroys just that key.

Keyed digests (``digest``) are HMACs under a key derived from the tenant key: equal
values of one field give equal digests (equality filters over sealed values), and
shredding the tenant key makes them meaningless.

Shredding replaces a key's wrapped bytes with a tombstone in one statement: every
token under it, in events, read models and blobs, is unreadable from then on, and a
shredded key is never re-created. Unwrapped keys are cached: for reading for
``cache_seconds``, so another process's shred takes effect here within that time; for
sealing for ``seal_cache_seconds`` (minutes: sealing with a key shredded meanwhile only
makes data nobody can read, and a burst of new mail in thousands of accounts must not
cost a key lookup per account). A value revealed only to decide how new data of the
same owner is sealed (``reveal(..., sealing=True)``: the account's own address, for a
message's direction) takes the key as sealing does, for the same reason.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from application.ports import SqlDatabase
from application.privacy import KeyErased
from infrastructure.crypto.body_keys import (
    BodyKeys,
    body_key_id,
    body_key_name,
    named_body_key,
)
from infrastructure.crypto.randomness import random_bytes

log = logging.getLogger("tidings.crypto")

TOKEN_PREFIX = "pii2"  # noqa: S105 - a format tag, not a secret
LEGACY_PREFIX = "pii1"
PII = "pii"  # the purpose of mail and account personal data
KEYS_TABLE = "crypto_keys"
LIVE_RECHECK = 2.0  # seconds a tenant seen unshredded is taken as such (tenant_shredded)


class KeyShredded(KeyErased):
    """Sealing under a key that was shredded (its account or tenant was erased)."""


def _seal(key: bytes | AESGCM, aad: str, plaintext: bytes) -> bytes:
    aead = key if isinstance(key, AESGCM) else AESGCM(key)
    nonce = random_bytes(12)
    return nonce + aead.encrypt(nonce, plaintext, aad.encode())


def _open(key: bytes, aad: str, sealed: bytes) -> bytes:
    return AESGCM(key).decrypt(sealed[:12], sealed[12:], aad.encode())


def _token_aad(key_id: str, purpose: str) -> str:
    return f"{TOKEN_PREFIX}\x00{key_id}\x00{purpose}"


def _key_id(tenant_id: str, account_id: str | None) -> str:
    if account_id is None:
        return f"t.{tenant_id}"
    return f"a.{account_id}@{tenant_id}"


def _split(token: str) -> tuple[str, str, str] | None:
    """(format tag, key id, sealed text) of a token, or None when it is not one."""
    try:
        prefix, rest = token.split(":", 1)
        key_id, sealed = rest.rsplit(":", 1)
    except ValueError:
        return None
    return prefix, key_id, sealed


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
        # Built from a key's bytes, so they live as long as the key: a shredded or
        # rotated key is looked up (``_chain``) before any of them is used.
        self._aeads: dict[bytes, AESGCM] = {}
        self._macs: dict[tuple[bytes, str], hmac.HMAC] = {}
        self._seen_live: dict[str, float] = {}  # tenant key id -> when last seen unshredded
        self.bodies = BodyKeys(db, self.account_key, cache_seconds)

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {KEYS_TABLE} (key_id TEXT PRIMARY KEY,"
                " wrapped TEXT)"  # NULL wrapped = shredded
            )
        self.bodies.setup()

    # --- keys ---------------------------------------------------------------------

    def _key(
        self, key_id: str, parent: tuple[str, bytes] | None, create: bool, sealing: bool = False
    ) -> bytes | None:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key_id)
        max_age = self._seal_cache_seconds if create or sealing else self._cache_seconds
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

    def _chain(
        self, tenant_id: str, account_id: str | None, create: bool, sealing: bool = False
    ) -> tuple[str, bytes]:
        """The owner's key; ``create``: made where missing; ``create`` or ``sealing``: as
        cached for sealing (longer)."""
        tenant_key_id = _key_id(tenant_id, None)
        tenant_key = self._key(tenant_key_id, None, create, sealing)
        if tenant_key is None:
            raise KeyShredded(tenant_key_id)
        if account_id is None:
            return tenant_key_id, tenant_key
        account_key_id = _key_id(tenant_id, account_id)
        account_key = self._key(account_key_id, (tenant_key_id, tenant_key), create, sealing)
        if account_key is None:
            raise KeyShredded(account_key_id)
        return account_key_id, account_key

    def account_key(self, tenant_id: str, account_id: str, *, sealing: bool = False) -> bytes:
        """The account's own key (sealed blobs); raises ``KeyErased`` once shredded.
        ``sealing``: to seal with (created when missing, cached longer)."""
        return self._chain(tenant_id, account_id, create=sealing)[1]

    # --- PiiCipher ----------------------------------------------------------------

    def seal(
        self, tenant_id: str, account_id: str | None, plaintext: str, purpose: str = PII
    ) -> str:
        return self.sealer(tenant_id, account_id, purpose)(plaintext)

    def sealer(
        self, tenant_id: str, account_id: str | None, purpose: str = PII
    ) -> Callable[[str], str]:
        key_id, key = self._chain(tenant_id, account_id, create=True)
        aead = self._aeads.get(key)
        if aead is None:
            aead = self._aeads[key] = AESGCM(key)
            _bound(self._aeads)
        prefix, aad = f"{TOKEN_PREFIX}:{key_id}:", _token_aad(key_id, purpose)

        def seal(plaintext: str) -> str:
            return prefix + base64.b64encode(_seal(aead, aad, plaintext.encode())).decode()

        return seal

    def body_sealer(
        self, tenant_id: str, account_id: str, body_ref: str | None, purpose: str = PII
    ) -> Callable[[str], str]:
        """A sealer under the key of the body ``body_ref`` names (what the body says must
        go with it), else, for a body of another kind or none, under the account's key."""
        name = body_key_name(body_ref)
        if name is None:
            return self.sealer(tenant_id, account_id, purpose)
        try:
            key = self.bodies.key(tenant_id, account_id, name, sealing=True)
        except KeyShredded:
            raise
        except KeyErased:  # a ref of another account's, or an erased body: not its key
            return self.sealer(tenant_id, account_id, purpose)
        key_id = body_key_id(tenant_id, account_id, name)
        aead = AESGCM(key)
        prefix, aad = f"{TOKEN_PREFIX}:{key_id}:", _token_aad(key_id, purpose)

        def seal(plaintext: str) -> str:
            return prefix + base64.b64encode(_seal(aead, aad, plaintext.encode())).decode()

        return seal

    def reveal(
        self,
        token: str,
        tenant_id: str,
        account_id: str | None,
        purpose: str = PII,
        *,
        sealing: bool = False,
    ) -> str | None:
        parts = _split(token)
        if parts is None:
            return None
        prefix, key_id, sealed = parts
        body_key = named_body_key(key_id, tenant_id, account_id)
        if body_key is None and key_id != _key_id(tenant_id, account_id):
            return None  # sealed for another owner: never decrypted here
        if prefix == TOKEN_PREFIX:
            aad = _token_aad(key_id, purpose)
        elif prefix == LEGACY_PREFIX:
            aad = key_id
        else:
            return None
        try:
            if body_key is not None and account_id is not None:
                key = self.bodies.key(tenant_id, account_id, body_key, sealing=sealing)
            else:
                _, key = self._chain(tenant_id, account_id, create=False, sealing=sealing)
            return _open(key, aad, base64.b64decode(sealed)).decode()
        except (KeyErased, InvalidTag, ValueError):
            return None

    def account_named_by(self, token: str) -> tuple[str, str] | None:
        """(tenant id, account id) of the account key a token names, or None: for a store
        whose rows are keyed by account id alone (secrets)."""
        parts = _split(token)
        if parts is None or not parts[1].startswith("a."):
            return None
        account_id, at, tenant_id = parts[1][2:].partition("@")
        return (tenant_id, account_id) if at else None

    def digest(self, tenant_id: str, purpose: str, text: str) -> str:
        """A keyed digest of ``text`` for ``purpose`` under the tenant's key; raises
        ``KeyErased`` once the tenant is shredded, or when it never sealed anything."""
        _, key = self._chain(tenant_id, None, create=False)
        mac = hmac.new(_digest_key(key), purpose.encode() + b"\x00", hashlib.sha256)
        mac.update(text.encode())
        return _short(mac)

    def digester(self, tenant_id: str, purpose: str) -> Callable[[str], str]:
        """``digest`` with the key looked up once, created when missing (for writes)."""
        _, key = self._chain(tenant_id, None, create=True)
        base = self._macs.get((key, purpose))
        if base is None:
            base = hmac.new(_digest_key(key), purpose.encode() + b"\x00", hashlib.sha256)
            self._macs[key, purpose] = base
            _bound(self._macs)

        def digest(text: str) -> str:
            mac = base.copy()
            mac.update(text.encode())
            return _short(mac)

        return digest

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
        self._shred(_key_id(tenant_id, account_id))

    def shred_tenant(self, tenant_id: str) -> None:
        self._shred(_key_id(tenant_id, None))

    def tenant_shredded(self, tenant_id: str) -> bool:
        """A shred is final, so it is remembered for good; a live tenant is looked up
        again after ``LIVE_RECHECK`` seconds, so another process's shred is seen soon."""
        key_id = _key_id(tenant_id, None)
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key_id)
            seen_live = self._seen_live.get(key_id)
        if cached is not None and cached[0] == float("inf"):
            return True
        if seen_live is not None and now - seen_live < LIVE_RECHECK:
            return False
        with self.db.reading() as cur:
            cur.execute(f"SELECT wrapped FROM {KEYS_TABLE} WHERE key_id = ?", (key_id,))
            row = cur.fetchone()
        with self._lock:
            if row is not None and row[0] is None:
                self._cache[key_id] = (float("inf"), None)
                return True
            _bound(self._seen_live, 10_000)
            self._seen_live[key_id] = now
        return False


def _bound(memo: dict[Any, Any], most: int = 1024) -> None:
    """Keep a memo of key-derived objects small: past ``most`` entries, start again."""
    if len(memo) > most:
        memo.clear()


def _short(mac: hmac.HMAC) -> str:
    # 128 bits (base64url, 22 characters): no accidental equality between values, and a
    # small read-model cell, rewritten with its row on every set.
    return base64.urlsafe_b64encode(mac.digest()[:16]).decode().rstrip("=")


def _digest_key(tenant_key: bytes) -> bytes:
    return hashlib.sha256(b"tidings-digest\x00" + tenant_key).digest()
