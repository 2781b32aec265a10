"""A message's attachments as ``send-message`` is given them: inline (base64) or by
``uploadId`` (``uploads.resolve``: the same account's, read whole but never past the
largest message that may be sent, all uploads together)."""

from __future__ import annotations

from collections.abc import Sequence

from application.context import Context
from application.mail.outbound.compose import Attachment
from application.mail.outbound.ports import UploadRecord
from application.mail.outbound.uploads import resolve
from application.result import Result

Resolved = list[tuple[Attachment, UploadRecord | None]]
Given = tuple[str | None, str | None, str | None, str | None]  # name, type, base64, upload


def resolve_all(
    ctx: Context, tenant: str, account_id: str, given: Sequence[Given]
) -> Resolved | Result:
    resolved: Resolved = []
    budget = ctx.policy.max_send_bytes
    for filename, content_type, content_base64, upload_id in given:
        if upload_id is None:
            assert filename is not None and content_base64 is not None  # the payload's rule
            kind = content_type or "application/octet-stream"
            resolved.append((Attachment(filename, kind, content_base64), None))
            continue
        upload = resolve(ctx, tenant, account_id, upload_id, budget)
        if isinstance(upload, Result):
            return upload
        budget -= upload.record.size
        attachment = Attachment(
            filename or upload.filename,
            content_type or upload.record.content_type,
            data=upload.content,
        )
        resolved.append((attachment, upload.record))
    return resolved


def discard_used(ctx: Context, records: Sequence[UploadRecord]) -> None:
    """The queued message holds the uploads' bytes now: their blobs go."""
    uploads = ctx.mail.uploads
    if uploads is None:
        return
    for record in {r.upload_id: r for r in records}.values():
        uploads.discard(record)
