import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from application.mail.ports import BlobNotFound, BlobStore
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.blobs.keyed_refs import BlobRefInvalid


@pytest.fixture
def store(tmp_path: Path) -> FilesystemBlobStore:
    return FilesystemBlobStore(tmp_path / "blobs")


def test_put_bytes_is_content_addressed_and_idempotent(store: FilesystemBlobStore) -> None:
    data = b"From: a@b\r\n\r\nhello"
    ref = store.put_bytes(data)
    hexdigest = hashlib.sha256(data).hexdigest()
    assert ref == f"sha256:{hexdigest}"
    assert store.put_bytes(data) == ref
    path = store.root / "sha256" / hexdigest[:2] / hexdigest[2:4] / hexdigest
    assert path.read_bytes() == data
    assert path.stat().st_mode & 0o077 == 0  # raw MIME is personal data
    with store.open(ref) as f:
        assert f.read() == data


def test_put_stream_equals_put_bytes_and_leaves_no_temp_files(store: FilesystemBlobStore) -> None:
    chunks = [b"a" * 1000, b"", b"b" * 3000, b"c"]
    ref = store.put_stream(iter(chunks))
    assert ref == store.put_bytes(b"".join(chunks))
    assert store.put_stream(iter(chunks)) == ref
    assert list((store.root / "tmp").iterdir()) == []


def test_a_failing_stream_stores_nothing(store: FilesystemBlobStore) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"partial"
        raise ConnectionResetError("gone")

    with pytest.raises(ConnectionResetError):
        store.put_stream(chunks())
    assert list((store.root / "tmp").iterdir()) == []
    assert not (store.root / "sha256").exists()


def test_delete_is_idempotent_and_open_raises_not_found(store: FilesystemBlobStore) -> None:
    ref = store.put_bytes(b"x")
    assert store.exists(ref)
    store.delete(ref)
    store.delete(ref)
    assert not store.exists(ref)
    with pytest.raises(BlobNotFound):
        store.open(ref)


@pytest.mark.parametrize("ref", ["", "sha256:", "md5:abc", "sha256:" + "g" * 64, "sha256:../x"])
def test_rejects_malformed_refs(store: FilesystemBlobStore, ref: str) -> None:
    with pytest.raises(BlobRefInvalid):
        store.open(ref)
    with pytest.raises(ValueError):
        store.delete(ref)


def test_implements_the_port(store: FilesystemBlobStore) -> None:
    port: BlobStore = store  # mypy checks that the class fits the port
    assert store.exists(store.put_bytes(b"y")) and port is store
