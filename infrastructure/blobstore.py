"""Content-addressed blob store on the local filesystem (the ``BlobStore`` port).

Layout: ``<root>/sha256/ab/cd/<hex>`` for ref ``sha256:<hex>``; temp files in
``<root>/tmp``. A put writes a temp file (streamed in chunks, hashing as it
goes), fsyncs it, renames it into place and fsyncs the directory, so a blob is
either absent or complete, also after a crash. Puts are idempotent: the same
content yields the same ref, and a concurrent writer of the same content only
replaces identical bytes. Files are created 0600: raw MIME is personal data.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from application.mail.ports import BlobNotFound, BlobStoreError

_REF = re.compile(r"^sha256:([0-9a-f]{64})$")


class BlobRefInvalid(BlobStoreError, ValueError):
    pass


class FilesystemBlobStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root)

    @property
    def root(self) -> Path:
        return self._root

    def path_of(self, ref: str) -> Path:
        match = _REF.match(ref)
        if not match:
            raise BlobRefInvalid("not a sha256 blob ref")
        hexdigest = match.group(1)
        return self._root / "sha256" / hexdigest[:2] / hexdigest[2:4] / hexdigest

    def put_bytes(self, data: bytes) -> str:
        ref = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.exists(ref):
            return ref
        return self.put_stream([data])

    def put_stream(self, chunks: Iterable[bytes]) -> str:
        tmp_dir = self._root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=tmp_dir, prefix="put-")
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    digest.update(chunk)
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            ref = "sha256:" + digest.hexdigest()
            final = self.path_of(ref)
            if final.exists():
                os.unlink(tmp_name)
                return ref
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp_name, final)
            _fsync_dir(final.parent)
            return ref
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise

    def open(self, ref: str) -> BinaryIO:
        try:
            return open(self.path_of(ref), "rb")  # the caller closes it
        except FileNotFoundError:
            raise BlobNotFound(ref) from None

    def exists(self, ref: str) -> bool:
        return self.path_of(ref).is_file()

    def delete(self, ref: str) -> None:
        path = self.path_of(ref)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
