"""Sealed (owned) blobs: round trip, idempotence, tamper and truncation detection,
erasure by key shredding, removal with the owner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from application.mail.ports import BlobNotFound, BlobOwner
from application.privacy import KeyErased
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.crypto.sealed_blobs import SEGMENT, SealedBlobCorrupt, SealedReader

OWNER = BlobOwner("tenant/one", "0b5c9a64-6f5e-4c38-9d1f-111111111111")
OTHER = BlobOwner("tenant/one", "0b5c9a64-6f5e-4c38-9d1f-222222222222")


class Keys:
    def __init__(self) -> None:
        self.keys: dict[str, bytes | None] = {}

    def __call__(self, tenant_id: str, account_id: str, *, sealing: bool = False) -> bytes:
        key = self.keys.setdefault(account_id, os.urandom(32))
        if key is None:
            raise KeyErased(account_id)
        return key


@pytest.fixture
def keys() -> Keys:
    return Keys()


@pytest.fixture
def store(tmp_path: Path, keys: Keys) -> FilesystemBlobStore:
    return FilesystemBlobStore(tmp_path, account_key=keys)


@pytest.mark.parametrize("size", [0, 1, SEGMENT - 1, SEGMENT, SEGMENT + 1, 3 * SEGMENT + 17])
def test_round_trip_at_segment_edges(store: FilesystemBlobStore, size: int) -> None:
    data = os.urandom(size)
    ref = store.put_stream(iter([data[:7], data[7:]]), owner=OWNER)
    with store.open(ref) as blob:
        assert blob.read() == data
    assert store.put_bytes(data, owner=OWNER) == ref  # same content, same ref


def test_ciphertext_on_disk_and_names_differ_per_account(store: FilesystemBlobStore) -> None:
    data = b"Subject: secret plans\r\n\r\nattack at dawn\r\n"
    ref, other = store.put_bytes(data, owner=OWNER), store.put_bytes(data, owner=OTHER)
    assert ref != other
    assert b"attack at dawn" not in store.path_of(ref).read_bytes()


def test_tampering_and_truncation_are_detected(store: FilesystemBlobStore) -> None:
    ref = store.put_bytes(os.urandom(2 * SEGMENT + 5), owner=OWNER)
    path = store.path_of(ref)
    sealed = path.read_bytes()
    path.chmod(0o600)
    path.write_bytes(sealed[:-40] + bytes(40))
    with pytest.raises(SealedBlobCorrupt), store.open(ref) as blob:
        blob.read()
    # Dropping the last segment entirely must not read as a shorter, valid blob.
    first_two = 4 + 16 + 2 * (4 + 12 + SEGMENT + 16)
    path.write_bytes(sealed[:first_two])
    with pytest.raises(SealedBlobCorrupt), store.open(ref) as blob:
        blob.read()


def test_shredded_key_makes_blobs_unreadable(store: FilesystemBlobStore, keys: Keys) -> None:
    ref = store.put_bytes(b"hello", owner=OWNER)
    keys.keys[OWNER.account_id] = None
    with pytest.raises(BlobNotFound):
        store.open(ref)
    with pytest.raises(KeyErased):
        store.put_bytes(b"more", owner=OWNER)


def test_delete_owner_removes_only_that_accounts_blobs(store: FilesystemBlobStore) -> None:
    mine, theirs = store.put_bytes(b"a", owner=OWNER), store.put_bytes(b"b", owner=OTHER)
    store.delete_owner(OWNER)
    assert not store.exists(mine)
    assert store.exists(theirs)
    store.delete_owner(OWNER)  # idempotent


def test_a_pack_holds_many_accounts_blobs_each_sealed_under_its_own_key(
    store: FilesystemBlobStore, keys: Keys, tmp_path: Path
) -> None:
    items = [(OWNER, b"first " * 100), (OTHER, b"second"), (OWNER, b""), (OTHER, b"x" * SEGMENT)]
    refs = store.put_packed(items)
    assert all(ref is not None and ref.startswith("pack2:") for ref in refs)
    assert len({store.path_of(ref) for ref in refs if ref}) == 1  # one file, one sync
    for (_, data), ref in zip(items, refs, strict=True):
        assert ref is not None and store.exists(ref)
        with store.open(ref) as f:
            assert f.read() == data
    on_disk = store.path_of(refs[0] or "").read_bytes()
    assert b"first first" not in on_disk and b"second" not in on_disk

    keys.keys[OTHER.account_id] = None  # OTHER deleted: its members unreadable, OWNER's not
    with pytest.raises(BlobNotFound):
        store.open(refs[1] or "")
    with store.open(refs[0] or "") as f:
        assert f.read() == items[0][1]


def test_packing_skips_the_blobs_of_an_erased_account(
    store: FilesystemBlobStore, keys: Keys
) -> None:
    keys.keys[OTHER.account_id] = None
    refs = store.put_packed([(OTHER, b"gone"), (OWNER, b"kept"), (OTHER, b"gone too")])
    assert refs[0] is None and refs[2] is None and refs[1] is not None
    with store.open(refs[1]) as f:
        assert f.read() == b"kept"
    assert store.put_packed([(OTHER, b"nothing written")]) == [None]


def test_deleting_one_pack_member_leaves_the_others(store: FilesystemBlobStore) -> None:
    first, second = store.put_packed([(OWNER, b"one"), (OTHER, b"two")])
    assert first is not None and second is not None
    store.delete(first)
    assert not store.exists(first)
    with pytest.raises(BlobNotFound):
        store.open(first)
    with store.open(second) as f:
        assert f.read() == b"two"


def test_a_blob_opens_only_as_its_owners(store: FilesystemBlobStore, keys: Keys) -> None:
    ref = store.put_bytes(b"mine alone", owner=OWNER)
    with store.open(ref, owner=OWNER) as blob:
        assert blob.read() == b"mine alone"
    with pytest.raises(BlobNotFound):
        store.open(ref, owner=OTHER)
    with pytest.raises(BlobNotFound):  # an unowned ref is no message body of anyone's
        store.open(store.put_bytes(b"plain"), owner=OWNER)


def test_a_tdb2_file_does_not_authenticate_for_another_owner(
    store: FilesystemBlobStore, keys: Keys
) -> None:
    ref = store.put_bytes(b"bound to its owner", owner=OWNER)
    path = store.path_of(ref)
    assert path.read_bytes().startswith(b"TDB2")
    key = keys(OWNER.tenant_id, OWNER.account_id)
    elsewhere = BlobOwner("tenant/two", OWNER.account_id)  # same key, another tenant
    with open(path, "rb") as file, pytest.raises(SealedBlobCorrupt):
        SealedReader(file, key, elsewhere).read()
    with open(path, "rb") as file:
        assert SealedReader(file, key, OWNER).read() == b"bound to its owner"


def test_delete_many_destroys_pack_members_and_owned_blobs_and_keeps_the_rest(
    store: FilesystemBlobStore,
) -> None:
    packed = store.put_packed([(OWNER, b"first"), (OTHER, b"second"), (OWNER, b"third")])
    owned = store.put_bytes(b"owned body", owner=OWNER)
    first, second, third = (ref or "" for ref in packed)
    before = store.path_of(first).read_bytes()
    unowned = store.put_bytes(b"shared by content")
    # Refs naming anyone but the owner given (or no one) are left alone.
    store.delete_many([(OWNER, second), (OTHER, first), (OWNER, unowned)])
    assert store.exists(second) and store.exists(first) and store.exists(unowned)
    mine = [(OWNER, third), (OWNER, first), (OWNER, owned)]
    store.delete_many(mine)
    store.delete_many(mine)  # idempotent
    for gone in (first, third, owned):
        assert not store.exists(gone)
        with pytest.raises(BlobNotFound):
            store.open(gone)
    with store.open(second) as f:
        assert f.read() == b"second"
    after = store.path_of(first).read_bytes()
    assert len(after) == len(before) and after.count(0) > before.count(0)
    store.delete_many([])
