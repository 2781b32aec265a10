"""Uploads: an attachment too large for a JSON payload, stored first and named by its
``uploadId`` in ``send-message``.

The bytes stream into a blob sealed under the account's key (``BlobStore.put_stream``
with the account as owner): never whole in memory, never in clear on disk. At most
``max_send_bytes``: past it the stream is abandoned (``UploadTooLarge``, 413) and nothing
is kept. An upload belongs to one tenant and account: ``resolve`` answers only to
``send-message`` from that very account, 404 for anyone else's id as for an unknown
one. It is kept until a message using it is queued (the composed message in the outbox
holds the bytes from then on) or for ``UPLOAD_LIFETIME``; expired ones are refused at
once and removed as later uploads come in (``UploadStore.expired``, a batch at a time).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from application.context import Context
from application.mail.outbound.access import load_sendable
from application.mail.outbound.compose import LINE_BREAKS
from application.mail.outbound.ports import UploadRecord
from application.mail.ports import BlobNotFound, BlobOwner
from application.privacy import KeyErased
from application.result import Result, not_found
from application.users import User

UPLOAD_LIFETIME = timedelta(days=1)
SWEEP_BATCH = 50
CONTENT_TYPE = re.compile(r"^[A-Za-z0-9.+-]{1,100}/[A-Za-z0-9.+-]{1,100}$")


class UploadTooLarge(Exception):
    pass


class UploadInterrupted(Exception):
    """The caller's stream ended early or too slowly: ``status`` and ``code`` to answer."""

    def __init__(self, code: str, status: int, detail: str) -> None:
        super().__init__(detail)
        self.code, self.status, self.detail = code, status, detail


def _bounded(chunks: Iterable[bytes], limit: int, counted: list[int]) -> Iterator[bytes]:
    for chunk in chunks:
        counted[0] += len(chunk)
        if counted[0] > limit:
            raise UploadTooLarge
        yield chunk


def _valid(filename: str, content_type: str) -> Result | None:
    if not 1 <= len(filename) <= 255 or not LINE_BREAKS.isdisjoint(filename):
        return Result.fail("invalid_payload", 400, "filename: 1 to 255 characters, no CR or LF")
    if not CONTENT_TYPE.match(content_type):
        return Result.fail("invalid_payload", 400, "contentType: type/subtype")
    return None


def store_upload(  # noqa: PLR0911 - a list of refusals
    ctx: Context,
    user: User,
    *,
    account_id: str,
    filename: str,
    content_type: str,
    chunks: Iterable[bytes],
) -> Result:
    """Stream ``chunks`` into a sealed blob of the account; the upload's id and size."""
    if (invalid := _valid(filename, content_type)) is not None:
        return invalid
    uploads = ctx.mail.uploads
    if uploads is None:
        return Result.fail("uploads_unavailable", 503, "uploads are not configured")
    sendable = load_sendable(ctx, user, account_id)
    if isinstance(sendable, Result):
        return sendable
    tenant, account = sendable.tenant_id, str(sendable.id)
    limit = ctx.policy.max_send_bytes
    counted = [0]
    try:
        sealed_name = ctx.mail.cipher.seal(tenant, account, filename)
        ref = ctx.mail.blobs.put_stream(
            _bounded(chunks, limit, counted), owner=BlobOwner(tenant, account)
        )
    except UploadTooLarge:
        return Result.fail(
            "upload_too_large",
            413,
            f"an upload is at most {limit} bytes (the largest message that may be sent)",
            limitBytes=limit,
        )
    except UploadInterrupted as error:
        return Result.fail(error.code, error.status, error.detail)
    except KeyErased:
        return not_found(f"mail account {account_id}")
    now = ctx.clock.now()
    record = UploadRecord(
        upload_id=str(uuid.uuid4()),
        tenant_id=tenant,
        account_id=account,
        blob_ref=ref,
        filename=sealed_name,
        content_type=content_type.lower(),
        size=counted[0],
        expires_at=(now + UPLOAD_LIFETIME).isoformat(),
    )
    uploads.add(record)
    for stale in uploads.expired(now.isoformat(), SWEEP_BATCH):
        uploads.discard(stale)
    return Result.ok(
        {
            "uploadId": record.upload_id,
            "accountId": account,
            "filename": filename,
            "contentType": record.content_type,
            "size": record.size,
            "expiresAt": record.expires_at,
        }
    )


@dataclass(frozen=True, slots=True)
class Uploaded:
    record: UploadRecord
    filename: str
    content: bytes


def resolve(
    ctx: Context, tenant: str, account_id: str, upload_id: str, budget: int
) -> Uploaded | Result:
    """The upload's bytes, for a message of ``account_id``: 404 unless it is that
    account's (of that tenant), still there and not expired; 413 past ``budget``."""
    uploads = ctx.mail.uploads
    record = uploads.get(upload_id) if uploads is not None else None
    missing = not_found(f"upload {upload_id}")
    if (
        record is None
        or record.tenant_id != tenant
        or record.account_id != account_id
        or datetime.fromisoformat(record.expires_at) <= ctx.clock.now()
    ):
        return missing
    if record.size > budget:
        return Result.fail(
            "message_too_large",
            413,
            f"the attachments come to more than {ctx.policy.max_send_bytes} bytes",
            limitBytes=ctx.policy.max_send_bytes,
        )
    filename = ctx.mail.cipher.reveal(record.filename, tenant, account_id)
    if filename is None:
        return missing
    try:
        with ctx.mail.blobs.open(record.blob_ref, owner=BlobOwner(tenant, account_id)) as blob:
            content = blob.read(record.size + 1)
    except BlobNotFound:
        return missing
    if len(content) != record.size:
        return missing
    return Uploaded(record, filename, content)
