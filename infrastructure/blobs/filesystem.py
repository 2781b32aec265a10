"""Content-addressed blob store on the local filesystem (the ``BlobStore`` port).

Layout: ``<root>/sha256/ab/cd/<hex>`` for ref ``sha256:<hex>``; temp files in
``<root>/tmp``. A put writes a temp file (streamed in chunks, hashing as it
goes), fsyncs it, renames it into place and fsyncs the directory, so a blob is
either absent or complete, also after a crash. Puts are idempotent: the same
content yields the same ref, and a concurrent writer of the same content only
replaces identical bytes. Files are created 0600: raw MIME is personal data.

Owned blobs (an account's mail, the normal case) are sealed under the account's key, bound
to their owner (``infrastructure.crypto.sealed_blobs``), and live under
``<root>/accounts/<account id>/``; their ref is
``acct1:<base64url tenant id>:<account id>:<keyed digest>``. ``open(ref, owner=…)``
refuses a ref that names anyone but the expected owner (an unowned ref included), so a
forged ref reads as not found. Shredding the account's key makes them unreadable;
``delete_owner`` removes the folder.

Mail bodies (``put_stream`` and ``put_packed`` with an owner, when the store has body
keys) are each sealed under a key of their own (``infrastructure.crypto.body_keys``),
named in the ref: ``body1:<base64url tenant id>:<account id>:<key name>`` for a streamed
body, in ``<root>/accounts/<account id>/bodies/``, and ``pack3:<…>:<key name>:<pack
id>:<offset>:<length>`` for a pack member. ``delete`` and ``delete_many`` destroy the key
first, then the bytes, so a copy of the files taken before reads as nothing after.

Packs: ``put_packed`` stores many small owned blobs, of any accounts, as one file in
``<root>/packs/<ab>/<pack id>``: each blob sealed on its own under its account's key,
one after the other, with one fsync of the file and one of its folder for them all (a
file and two fsyncs per message cost more than fetching, parsing and recording it; a
worker stores a whole group commit's mail as one pack). A member's ref is
``pack2:<base64url tenant id>:<account id>:<pack id>:<offset>:<length>``; it reads back
like any owned blob, and ``delete`` overwrites just its bytes. Deleting an account
shreds its key, which is what makes its members of shared packs unreadable;
``delete_owner`` removes only its own folder. (``pack1:`` refs, of packs that one account
owned in ``<root>/accounts/<account id>/packs/``, are still read.) A pack is written to
a temp file and renamed into place once durable, so it is absent or complete. Packed
puts are not idempotent: content fetched again (a crash before its events were
recorded, a UIDVALIDITY reset) is stored again, unreferenced.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

from application.mail.ports import BlobNotFound, BlobOwner, BlobStoreError
from application.privacy import KeyErased
from infrastructure.blobs.keyed_refs import (
    BlobRefInvalid,
    BodyKeys,
    KeyedRef,
    b64,
    member_ref,
    streamed_ref,
    unb64,
)
from infrastructure.crypto.randomness import random_bytes
from infrastructure.crypto.sealed_blobs import (
    MAGICS,
    AccountKey,
    SealedBlobCorrupt,
    SealedReader,
    mac_key,
    seal_to,
)
from infrastructure.private_files import FILE_MODE, make_private_dir

_REF = re.compile(r"^sha256:([0-9a-f]{64})$")
_OWNED = re.compile(r"^acct1:([A-Za-z0-9_-]*):([A-Za-z0-9-]{1,64}):([0-9a-f]{64})$")
_PACKED = re.compile(
    r"^pack([12]):([A-Za-z0-9_-]*):([A-Za-z0-9-]{1,64}):([0-9a-f]{32}):([0-9]{1,15}):([0-9]{1,15})$"
)


class _Counted:
    """A new file written through, its size counted: a file's ``tell()`` is a system call
    (and a GIL hand-off), twice per blob of a pack that holds hundreds."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.written = 0

    def write(self, data: bytes, /) -> int:
        self.written += len(data)
        return self._file.write(data)


class FilesystemBlobStore:
    def __init__(
        self,
        root: str | os.PathLike[str],
        account_key: AccountKey | None = None,
        body_keys: BodyKeys | None = None,
    ) -> None:
        self._root = Path(root)
        self._account_key = account_key
        self._body_keys = body_keys

    @property
    def root(self) -> Path:
        return self._root

    def path_of(self, ref: str) -> Path:
        keyed = KeyedRef.of(ref)
        if keyed is not None:
            return self._body_path(keyed)
        packed = _PACKED.match(ref)
        if packed:
            kind, account_id, pack_id = packed.group(1), packed.group(3), packed.group(4)
            if kind == "1":
                return self._root / "accounts" / account_id / "packs" / pack_id
            return self._root / "packs" / pack_id[:2] / pack_id
        owned = _OWNED.match(ref)
        if owned:
            account_id, hexdigest = owned.group(2), owned.group(3)
            return self._root / "accounts" / account_id / hexdigest[:2] / hexdigest
        match = _REF.match(ref)
        if not match:
            raise BlobRefInvalid("not a blob ref")
        hexdigest = match.group(1)
        return self._root / "sha256" / hexdigest[:2] / hexdigest[2:4] / hexdigest

    def _body_path(self, body: KeyedRef) -> Path:
        if body.pack is not None:
            return self._root / "packs" / body.pack[:2] / body.pack
        account = self._root / "accounts" / body.owner.account_id
        return account / "bodies" / body.name[:2] / body.name

    def _key(self, owner: BlobOwner, *, sealing: bool = False) -> bytes:
        if self._account_key is None:
            raise BlobStoreError("this blob store has no keys: it cannot seal owned blobs")
        return self._account_key(owner.tenant_id, owner.account_id, sealing=sealing)

    @staticmethod
    def _owned_ref(owner: BlobOwner, hexdigest: str) -> str:
        return f"acct1:{b64(owner.tenant_id)}:{owner.account_id}:{hexdigest}"

    def put_bytes(self, data: bytes, *, owner: BlobOwner | None = None) -> str:
        """An owned blob here is sealed under the account's key and named by its content
        (idempotent); mail bodies go through ``put_stream`` and ``put_packed``."""
        if owner is None:
            ref = "sha256:" + hashlib.sha256(data).hexdigest()
        else:
            key = self._key(owner, sealing=True)
            digest = hmac.new(mac_key(key), data, hashlib.sha256).hexdigest()
            ref = self._owned_ref(owner, digest)
        if self.exists(ref):
            return ref
        if owner is None:
            return self.put_stream([data])
        key = self._key(owner, sealing=True)
        return self._write(lambda f: self._owned_ref(owner, seal_to(f, [data], key, owner)))

    def put_stream(self, chunks: Iterable[bytes], *, owner: BlobOwner | None = None) -> str:
        if owner is None:
            return self._write(lambda f: "sha256:" + _copy_hashing(chunks, f))
        if self._body_keys is not None:
            [made] = self._body_keys.create([(owner.tenant_id, owner.account_id)])
            if made is None:
                raise KeyErased(owner.account_id)
            name, body_key = made
            ref = streamed_ref(owner, name)
            try:
                return self._write(lambda f: (seal_to(f, chunks, body_key, owner), ref)[1])
            except BaseException:  # the stream failed: its key goes with the bytes
                self._body_keys.destroy([(owner.tenant_id, owner.account_id, name)])
                raise
        key = self._key(owner, sealing=True)
        return self._write(lambda f: self._owned_ref(owner, seal_to(f, chunks, key, owner)))

    def put_packed(self, items: Sequence[tuple[BlobOwner, bytes]]) -> list[str | None]:
        """Store owned blobs of any accounts durably, as one pack with one sync; their
        refs in order, None for a blob whose account's key is erased (not written)."""
        if self._body_keys is not None:
            return self._put_keyed(items)
        keys: dict[BlobOwner, bytes | None] = {}
        for owner, _ in items:
            if owner not in keys:
                try:
                    keys[owner] = self._key(owner, sealing=True)
                except KeyErased:
                    keys[owner] = None
        refs: list[str | None] = []
        if not any(keys.values()):
            return [None] * len(items)
        pack_id = random_bytes(16).hex()

        def fill(f: BinaryIO) -> str:
            pack = _Counted(f)
            for owner, data in items:
                key = keys[owner]
                if key is None:
                    refs.append(None)
                    continue
                offset = pack.written
                seal_to(pack, [data], key, owner)
                refs.append(
                    f"pack2:{b64(owner.tenant_id)}:{owner.account_id}:{pack_id}:"
                    f"{offset}:{pack.written - offset}"
                )
            return next(ref for ref in refs if ref is not None)

        self._write(fill)
        return refs

    def _put_keyed(self, items: Sequence[tuple[BlobOwner, bytes]]) -> list[str | None]:
        """``put_packed`` with a key of its own for each blob (all made in one statement)."""
        assert self._body_keys is not None
        keys = self._body_keys.create([(o.tenant_id, o.account_id) for o, _ in items])
        refs: list[str | None] = []
        if not any(keys):
            return [None] * len(items)
        pack_id = random_bytes(16).hex()

        def fill(f: BinaryIO) -> str:
            pack = _Counted(f)
            for (owner, data), made in zip(items, keys, strict=True):
                if made is None:
                    refs.append(None)
                    continue
                offset = pack.written
                seal_to(pack, [data], made[1], owner)
                refs.append(member_ref(owner, made[0], pack_id, offset, pack.written - offset))
            return next(ref for ref in refs if ref is not None)

        self._write(fill)
        return refs

    def _write(self, fill: Callable[[BinaryIO], str]) -> str:
        """Fill a temp file, make it durable, rename it to the ref ``fill`` answers."""
        tmp_dir = self._root / "tmp"
        make_private_dir(tmp_dir)
        fd, tmp_name = tempfile.mkstemp(dir=tmp_dir, prefix="put-")
        os.fchmod(fd, FILE_MODE)  # 0600 whatever the umask
        try:
            with os.fdopen(fd, "wb") as f:
                ref = fill(f)
                f.flush()
                os.fsync(f.fileno())
            final = self.path_of(ref)
            if final.exists():
                os.unlink(tmp_name)
                return ref
            make_private_dir(final.parent)
            os.replace(tmp_name, final)
            _fsync_dir(final.parent)
            return ref
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise

    def open(self, ref: str, *, owner: BlobOwner | None = None) -> BinaryIO:  # noqa: C901
        keyed = KeyedRef.of(ref)
        if keyed is not None:
            return self._open_keyed(ref, keyed, owner)
        path = self.path_of(ref)
        owned = _OWNED.match(ref) or _PACKED.match(ref)
        named: BlobOwner | None = None
        if owned is not None and owned.re is _PACKED:
            named = BlobOwner(unb64(owned.group(2)), owned.group(3))
        elif owned is not None:
            named = BlobOwner(unb64(owned.group(1)), owned.group(2))
        if owner is not None and named != owner:
            raise BlobNotFound(f"{ref} (not the owner's)")  # never opened for anyone else
        try:
            file = open(path, "rb")  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            raise BlobNotFound(ref) from None
        if owned is None or named is None:
            return file
        if owned.re is _PACKED:
            file.seek(int(owned.group(5)))
        try:
            reader = SealedReader(file, self._key(named), named)
        except KeyErased:
            file.close()
            raise BlobNotFound(f"{ref} (erased)") from None
        except SealedBlobCorrupt:
            file.close()
            if owned.re is _PACKED:  # a deleted pack member: its bytes were overwritten
                raise BlobNotFound(f"{ref} (deleted)") from None
            raise
        except BaseException:
            file.close()
            raise
        return io.BufferedReader(reader, buffer_size=64 * 1024)

    def _body_key(self, keyed: KeyedRef) -> bytes:
        if self._body_keys is None:
            raise BlobStoreError("this blob store has no body keys")
        return self._body_keys.key(keyed.owner.tenant_id, keyed.owner.account_id, keyed.name)

    def _open_keyed(self, ref: str, keyed: KeyedRef, owner: BlobOwner | None) -> BinaryIO:
        if owner is not None and keyed.owner != owner:
            raise BlobNotFound(f"{ref} (not the owner's)")  # never opened for anyone else
        try:
            key = self._body_key(keyed)
        except KeyErased:
            raise BlobNotFound(f"{ref} (erased)") from None
        try:
            file = open(self.path_of(ref), "rb")  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            raise BlobNotFound(ref) from None
        try:
            file.seek(keyed.offset)
            reader = SealedReader(file, key, keyed.owner)
        except SealedBlobCorrupt:
            file.close()
            if keyed.pack is not None:  # a deleted pack member: its bytes were overwritten
                raise BlobNotFound(f"{ref} (deleted)") from None
            raise
        except BaseException:
            file.close()
            raise
        return io.BufferedReader(reader, buffer_size=64 * 1024)

    def delete_owner(self, owner: BlobOwner) -> None:
        shutil.rmtree(self._root / "accounts" / owner.account_id, ignore_errors=True)

    def _keyed_exists(self, ref: str, keyed: KeyedRef) -> bool:
        try:  # a body lives as long as its key
            self._body_key(keyed)
        except KeyErased:
            return False
        try:
            with open(self.path_of(ref), "rb") as f:
                f.seek(keyed.offset)
                return f.read(4) in MAGICS
        except FileNotFoundError:
            return False

    def exists(self, ref: str) -> bool:
        keyed = KeyedRef.of(ref)
        if keyed is not None:
            return self._keyed_exists(ref, keyed)
        packed = _PACKED.match(ref)
        if packed is None:
            return self.path_of(ref).is_file()
        try:  # a member of a shared pack outlives its account's folder, not its key
            self._key(BlobOwner(unb64(packed.group(2)), packed.group(3)))
        except KeyErased:
            return False
        try:
            with open(self.path_of(ref), "rb") as f:
                f.seek(int(packed.group(5)))
                return f.read(4) in MAGICS
        except FileNotFoundError:
            return False

    def delete_many(self, items: Sequence[tuple[BlobOwner, str]]) -> None:
        """``delete`` of each (owner, ref) whose ref names that owner, with one open and
        one fsync per pack file (a batch of members of one pack is one sync, not one
        each). A ref naming anyone else, or no one (an unowned blob, shared by content
        across accounts), is passed over, as ``open`` refuses it. A body under a key of its
        own loses its key first (one statement per account), then its bytes."""
        members: dict[Path, list[tuple[int, int]]] = {}
        keyed = [(owner, ref, KeyedRef.of(ref)) for owner, ref in items]  # parsed once
        self._destroy_keys([k for owner, _, k in keyed if k is not None and k.owner == owner])
        for owner, ref, body in keyed:
            if body is not None and body.owner == owner:
                if body.pack is None:
                    _unlink(self._body_path(body))
                else:
                    spans = members.setdefault(self._body_path(body), [])
                    spans.append((body.offset, body.length))
                continue
            if body is not None or _named_owner(ref) != owner:
                continue
            packed = _PACKED.match(ref)
            if packed is None:
                self.delete(ref)
                continue
            span = (int(packed.group(5)), int(packed.group(6)))
            members.setdefault(self.path_of(ref), []).append(span)
        for path, spans in members.items():
            with contextlib.suppress(FileNotFoundError), open(path, "r+b") as f:
                for offset, length in sorted(spans):
                    f.seek(offset)
                    f.write(bytes(length))
                f.flush()
                os.fsync(f.fileno())

    def _destroy_keys(self, bodies: Sequence[KeyedRef]) -> None:
        if not bodies:
            return
        if self._body_keys is None:
            raise BlobStoreError("this blob store has no body keys")
        self._body_keys.destroy([(b.owner.tenant_id, b.owner.account_id, b.name) for b in bodies])

    def delete(self, ref: str) -> None:
        keyed = KeyedRef.of(ref)
        if keyed is not None:
            self.delete_many([(keyed.owner, ref)])
            return
        path = self.path_of(ref)
        packed = _PACKED.match(ref)
        if packed is not None:  # one member of a pack: overwrite its bytes in place
            with contextlib.suppress(FileNotFoundError), open(path, "r+b") as f:
                f.seek(int(packed.group(5)))
                f.write(bytes(int(packed.group(6))))
                f.flush()
                os.fsync(f.fileno())
            return
        _unlink(path)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        _fsync_dir(path.parent)


def _named_owner(ref: str) -> BlobOwner | None:
    """The owner an owned or packed ref names (None: an unowned ref, or not a ref)."""
    keyed = KeyedRef.of(ref)
    if keyed is not None:
        return keyed.owner
    packed = _PACKED.match(ref)
    if packed is not None:
        return BlobOwner(unb64(packed.group(2)), packed.group(3))
    owned = _OWNED.match(ref)
    if owned is not None:
        return BlobOwner(unb64(owned.group(1)), owned.group(2))
    return None


def _copy_hashing(chunks: Iterable[bytes], file: BinaryIO) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
        file.write(chunk)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
