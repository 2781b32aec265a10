"""Implements ``UploadStore`` on the read-model database: one row per upload waiting to
be attached (``mail_uploads``), its sealed blob in the blob store. ``discard`` destroys
the blob first (its key, then its bytes), then the row: a crash between them leaves a
row whose blob reads as not found, which ``resolve`` answers 404 and the sweep removes."""

from __future__ import annotations

import contextlib
from typing import Any

from application.mail.outbound.ports import UploadRecord
from application.mail.ports import BlobNotFound
from application.ports import SqlDatabase
from infrastructure.blobs.filesystem import FilesystemBlobStore

TABLE = "mail_uploads"
_COLUMNS = "upload_id, tenant_id, account_id, blob_ref, filename, content_type, size, expires_at"


class SqlUploads:
    def __init__(self, db: SqlDatabase, blobs: FilesystemBlobStore) -> None:
        self.db = db
        self.blobs = blobs

    def setup(self) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (upload_id TEXT PRIMARY KEY,"
                " tenant_id TEXT NOT NULL, account_id TEXT NOT NULL, blob_ref TEXT NOT NULL,"
                " filename TEXT NOT NULL, content_type TEXT NOT NULL, size BIGINT NOT NULL,"
                " expires_at TEXT NOT NULL)"
            )
            cur.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_expiry ON {TABLE} (expires_at)")

    def add(self, record: UploadRecord) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.upload_id,
                    record.tenant_id,
                    record.account_id,
                    record.blob_ref,
                    record.filename,
                    record.content_type,
                    record.size,
                    record.expires_at,
                ),
            )

    def get(self, upload_id: str) -> UploadRecord | None:
        with self.db.reading() as cur:
            cur.execute(f"SELECT {_COLUMNS} FROM {TABLE} WHERE upload_id = ?", (upload_id,))
            row = cur.fetchone()
        return None if row is None else _record(row)

    def expired(self, now: str, limit: int) -> list[UploadRecord]:
        with self.db.reading() as cur:
            cur.execute(
                f"SELECT {_COLUMNS} FROM {TABLE} WHERE expires_at <= ? ORDER BY expires_at LIMIT ?",
                (now, limit),
            )
            rows = cur.fetchall()
        return [_record(row) for row in rows]

    def discard(self, record: UploadRecord) -> None:
        with contextlib.suppress(BlobNotFound, FileNotFoundError):
            self.blobs.delete(record.blob_ref)
        with self.db.transaction() as cur:
            cur.execute(f"DELETE FROM {TABLE} WHERE upload_id = ?", (record.upload_id,))


def _record(row: Any) -> UploadRecord:
    return UploadRecord(
        upload_id=str(row[0]),
        tenant_id=str(row[1]),
        account_id=str(row[2]),
        blob_ref=str(row[3]),
        filename=str(row[4]),
        content_type=str(row[5]),
        size=int(row[6]),
        expires_at=str(row[7]),
    )
