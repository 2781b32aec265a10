"""Sealed blobs: an account's raw MIME, encrypted under the account's own key.

File format: ``TDB2`` + a random 16-byte file id, then segments of up to 1 MiB of
plaintext, each ``len(4, big-endian) + nonce(12) + AES-GCM ciphertext``. A segment's
additional data is the format tag, the owner (tenant id and account id), the file id, the
segment index and a last-segment flag, so segments cannot be reordered, moved between
files, cut off unnoticed, or opened as any other owner's blob.

``TDB1`` files (additional data without the tag and the owner) are still read. That is
safe: they are sealed under the account's own key, which no other account holds, and the
store opens a blob only for the owner its ref names (and, for a message body, the
message's own account); the owner in the additional data adds a second, independent
check for new files. The blob's name is an HMAC of the
plaintext under a key derived from the account key: stable for identical content within
the account (puts stay idempotent), meaningless outside it.

Shredding the account's key makes every sealed blob unreadable; ``delete_owner`` then
removes the files too.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import struct
from collections.abc import Iterable, Iterator
from typing import BinaryIO, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from application.mail.ports import BlobOwner, BlobStoreError
from infrastructure.crypto.randomness import random_bytes

MAGIC = b"TDB2"
LEGACY_MAGIC = b"TDB1"
MAGICS = (MAGIC, LEGACY_MAGIC)  # both 4 bytes
SEGMENT = 1024 * 1024


class Writer(Protocol):
    def write(self, data: bytes, /) -> object: ...


class AccountKey(Protocol):
    """The account's key; raises ``KeyErased`` once shredded. ``sealing``: to seal with."""

    def __call__(self, tenant_id: str, account_id: str, *, sealing: bool = False) -> bytes: ...


class SealedBlobCorrupt(BlobStoreError):
    pass


def mac_key(account_key: bytes) -> bytes:
    return hashlib.sha256(b"tidings-blob-name\x00" + account_key).digest()


def _owner_binding(owner: BlobOwner) -> bytes:
    tenant, account = owner.tenant_id.encode(), owner.account_id.encode()
    return MAGIC + b"".join(struct.pack(">I", len(part)) + part for part in (tenant, account))


def _aad(binding: bytes, file_id: bytes, index: int, last: bool) -> bytes:
    return binding + file_id + struct.pack(">Q?", index, last)


def _segments(chunks: Iterable[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Re-cut the chunks into SEGMENT-sized pieces, flagging the last one."""
    buffer = bytearray()
    pending: bytes | None = None
    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= SEGMENT:
            if pending is not None:
                yield pending, False
            pending = bytes(buffer[:SEGMENT])
            del buffer[:SEGMENT]
    if buffer or pending is None:
        if pending is not None:
            yield pending, False
        yield bytes(buffer), True
    else:
        yield pending, True


def seal_to(file: Writer, chunks: Iterable[bytes], key: bytes, owner: BlobOwner) -> str:
    """Write the sealed form of the chunks; return the blob's keyed digest (hex)."""
    aead = AESGCM(key)
    name = hmac.new(mac_key(key), digestmod=hashlib.sha256)
    binding = _owner_binding(owner)
    file_id = random_bytes(16)
    file.write(MAGIC + file_id)
    for index, (segment, last) in enumerate(_segments(chunks)):
        name.update(segment)
        nonce = random_bytes(12)
        sealed = aead.encrypt(nonce, segment, _aad(binding, file_id, index, last))
        file.write(struct.pack(">I", len(sealed)) + nonce + sealed)
    return name.hexdigest()


class SealedReader(io.RawIOBase):
    """Decrypts a sealed file segment by segment, as a readable binary stream; a ``TDB2``
    file only for the owner it was sealed for."""

    def __init__(self, file: BinaryIO, key: bytes, owner: BlobOwner) -> None:
        self._file = file
        self._aead = AESGCM(key)
        header = file.read(len(MAGIC) + 16)
        if len(header) != len(MAGIC) + 16 or header[: len(MAGIC)] not in MAGICS:
            raise SealedBlobCorrupt("not a sealed blob")
        self._binding = _owner_binding(owner) if header.startswith(MAGIC) else b""
        self._file_id = header[len(MAGIC) :]
        self._index = 0
        self._buffer = memoryview(b"")
        self._done = False

    def readable(self) -> bool:
        return True

    def _next_segment(self) -> None:
        head = self._file.read(4)
        if len(head) < 4:
            raise SealedBlobCorrupt("sealed blob is truncated")
        (size,) = struct.unpack(">I", head)
        body = self._file.read(12 + size)
        if len(body) != 12 + size:
            raise SealedBlobCorrupt("sealed blob is truncated")
        for last in (False, True):
            try:
                plain = self._aead.decrypt(
                    body[:12], body[12:], _aad(self._binding, self._file_id, self._index, last)
                )
            except InvalidTag:
                continue
            self._index += 1
            self._buffer = memoryview(plain)
            self._done = last
            return
        raise SealedBlobCorrupt("sealed blob does not authenticate (wrong key or damaged)")

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buffer and not self._done:
            self._next_segment()
        n = min(len(target), len(self._buffer))
        target[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n

    def close(self) -> None:
        self._file.close()
        super().close()
