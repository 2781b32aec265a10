"""One data key per stored body (the crypto-shredding of a single message).

A body's blob and whatever the message's events hold derived from the body (its snippet)
are sealed under a key of its own, wrapped by the account's key and kept in
``message_keys``. Erasing the body deletes that row: the blob's bytes, a copy of the blob
directory taken before (a backup) and the snippet in an event export taken before are all
unreadable from then on, while the account's other mail keeps its keys. Shredding the
account or the tenant still erases every body: the wrapping key is gone.

A body key is named by 32 random hex digits; its id, ``b.<name>@<account id>@<tenant
id>``, is the additional data of its wrapping, so a wrapped key copied to another
account's or message's row does not unwrap. The name travels in the body's blob ref
(``pack3:`` and ``body1:`` refs, ``infrastructure.blobs.filesystem``), and a token sealed
under the key names it (``pii2:b.<name>@…``), so neither needs a lookup to find its key.

Unwrapped keys are cached for reading for ``cache_seconds`` (another process's erasure
takes effect here within that time), in a bounded memo: one entry per message read.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from application.ports import SqlDatabase
from application.privacy import KeyErased
from infrastructure.crypto.randomness import random_bytes

BODY_KEYS_TABLE = "message_keys"
_INSERT = f"INSERT INTO {BODY_KEYS_TABLE} (key_id, wrapped) {{rows}}"
_PG_ROWS = "SELECT * FROM unnest(?::text[], ?::text[])"
MEMO_SIZE = 8192
# The name of a body key inside a blob ref: ``pack3:<tenant>:<account>:<name>:…`` or
# ``body1:<tenant>:<account>:<name>``.
_REF_NAME = re.compile(r"^(?:pack3|body1):[A-Za-z0-9_-]*:[A-Za-z0-9-]{1,64}:([0-9a-f]{32})(?::|$)")
_KEY_ID = re.compile(r"^b\.([0-9a-f]{32})@(.+)$")

AccountKey = Callable[..., bytes]


class BodyKeyErased(KeyErased):
    """The body's key is gone: its body was erased (or its account or tenant)."""


def body_key_id(tenant_id: str, account_id: str, name: str) -> str:
    return f"b.{name}@{account_id}@{tenant_id}"


def body_key_name(ref: str | None) -> str | None:
    """The name of the body key a blob ref names (None: a ref of another kind)."""
    match = _REF_NAME.match(ref or "")
    return match.group(1) if match else None


def named_body_key(key_id: str, tenant_id: str, account_id: str | None) -> str | None:
    """The name in ``key_id`` when it is a body key of that very account, else None."""
    match = _KEY_ID.match(key_id)
    if match is None or account_id is None or match.group(2) != f"{account_id}@{tenant_id}":
        return None
    return match.group(1)


class BodyKeys:
    def __init__(self, db: SqlDatabase, account_key: AccountKey, cache_seconds: float) -> None:
        self.db = db
        self._account_key = account_key
        self._cache_seconds = cache_seconds
        self._memo: dict[str, tuple[float, bytes]] = {}  # key id -> (unwrapped at, key)
        self._lock = threading.Lock()

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {BODY_KEYS_TABLE} (key_id TEXT PRIMARY KEY,"
                " wrapped TEXT NOT NULL)"
            )

    def create(self, owners: Sequence[tuple[str, str]]) -> list[tuple[str, bytes] | None]:
        """A fresh key for each (tenant, account), all stored in one statement: (name,
        key) in order, None for an owner whose account key is erased."""
        wrapping: dict[tuple[str, str], AESGCM | None] = {}
        for owner in owners:
            if owner not in wrapping:
                try:
                    wrapping[owner] = AESGCM(self._account_key(*owner, sealing=True))
                except KeyErased:
                    wrapping[owner] = None
        made: list[tuple[str, bytes] | None] = []
        rows: list[tuple[str, str]] = []
        now = time.monotonic()
        for tenant_id, account_id in owners:
            parent = wrapping[tenant_id, account_id]
            if parent is None:
                made.append(None)
                continue
            name, key = random_bytes(16).hex(), AESGCM.generate_key(bit_length=256)
            key_id = body_key_id(tenant_id, account_id, name)
            nonce = random_bytes(12)
            wrapped = nonce + parent.encrypt(nonce, key, key_id.encode())
            rows.append((key_id, base64.b64encode(wrapped).decode()))
            made.append((name, key))
            self._remember(key_id, now, key)
        if rows:
            with self.db.transaction() as cur:
                if self.db.dialect == "postgresql":  # one statement, not one per key
                    columns = [list(c) for c in zip(*rows, strict=True)]
                    cur.execute(_INSERT.format(rows=_PG_ROWS), columns)
                else:
                    cur.executemany(_INSERT.format(rows="VALUES (?, ?)"), rows)
        return made

    def key(self, tenant_id: str, account_id: str, name: str, *, sealing: bool = False) -> bytes:
        """The body key; raises ``BodyKeyErased`` when it is gone (``KeyErased`` when its
        account's or tenant's is). ``sealing``: to seal with, the account key as cached
        for sealing (an account's shred counts within the sealer's cache time)."""
        key_id = body_key_id(tenant_id, account_id, name)
        now = time.monotonic()
        with self._lock:
            cached = self._memo.get(key_id)
        parent = self._account_key(tenant_id, account_id, sealing=sealing)  # a shred counts
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        with self.db.reading() as cur:
            cur.execute(f"SELECT wrapped FROM {BODY_KEYS_TABLE} WHERE key_id = ?", (key_id,))
            row = cur.fetchone()
        if row is None:
            raise BodyKeyErased(key_id)
        wrapped = base64.b64decode(row[0])
        try:
            key = AESGCM(parent).decrypt(wrapped[:12], wrapped[12:], key_id.encode())
        except InvalidTag:
            raise BodyKeyErased(key_id) from None
        self._remember(key_id, now, key)
        return key

    def destroy(self, keys: Sequence[tuple[str, str, str]]) -> None:
        """Delete the keys, each (tenant, account, name), in one statement (a key already
        gone is no error)."""
        ids = [body_key_id(*key) for key in keys]
        if not ids:
            return
        with self.db.transaction() as cur:
            marks = ", ".join("?" for _ in ids)
            cur.execute(f"DELETE FROM {BODY_KEYS_TABLE} WHERE key_id IN ({marks})", ids)
        with self._lock:
            for key_id in ids:
                self._memo.pop(key_id, None)

    def _remember(self, key_id: str, at: float, key: bytes) -> None:
        with self._lock:
            _bound(self._memo)
            self._memo[key_id] = (at, key)


def _bound(memo: dict[Any, Any]) -> None:
    if len(memo) >= MEMO_SIZE:
        memo.clear()
