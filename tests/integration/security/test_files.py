"""Files are private: the SQLite database (with its WAL and shared-memory files), blob
files and the generated key file are 0600 and the directories made for them 0700,
even under a permissive umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from application import User
from application.app import App
from application.mail.ports import BlobOwner
from infrastructure.blobs.filesystem import FilesystemBlobStore
from tests.support.results import ok


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("permissive_umask")
def test_data_files_are_0600_and_their_directories_0700(
    make_app: Callable[..., App], database_url: str, tmp_path: Path, admin: User
) -> None:
    data = tmp_path / "data" / "blobs"
    if database_url.startswith("sqlite"):
        database_url = f"sqlite:///{tmp_path / 'db' / 'nested' / 'tidings.db'}"
    app = make_app(database_url=database_url, blob_dir=data)
    connect = {
        "provider": "imap",
        "displayName": "Box",
        "address": "box@mailbox.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": "127.0.0.1", "port": 143, "security": "none", "username": "box"},
        "secret": "pw",
    }
    account_id = ok(app.write("connect-mail-account", connect, admin))["accountId"]
    owner = BlobOwner(admin.tenant_id, account_id)
    filesystem_blobs(app).put_bytes(b"Subject: hi\r\n\r\nbody\r\n", owner=owner)
    filesystem_blobs(app).put_bytes(b"unowned\r\n")
    app.ctx.mail.blobs.put_packed([(owner, b"Subject: packed\r\n\r\nx\r\n")])

    files = [p for p in data.rglob("*") if p.is_file()]
    assert data / "master.key" in files and len(files) >= 4
    assert {p: mode(p) for p in files} == {p: 0o600 for p in files}
    dirs = [data, data.parent, *(p for p in data.rglob("*") if p.is_dir())]
    assert {p: mode(p) for p in dirs} == {p: 0o700 for p in dirs}

    if database_url.startswith("sqlite"):
        db = tmp_path / "db" / "nested" / "tidings.db"
        written = [db, *(db.with_name(db.name + s) for s in ("-wal", "-shm"))]
        assert all(p.exists() for p in written)
        assert {p: mode(p) for p in written} == {p: 0o600 for p in written}
        assert mode(db.parent) == mode(db.parent.parent) == 0o700


def filesystem_blobs(app: App) -> FilesystemBlobStore:
    blobs = app.ctx.mail.blobs
    assert isinstance(blobs, FilesystemBlobStore)
    return blobs
