"""get-attachment: one attachment of a message, its decoded bytes as base64.

The attachment is found by decoding the message's own sealed raw MIME (opened only as a
blob of the message's account and tenant), so an attachment id from another message or
tenant is 404. An attachment over ``max_attachment_result_bytes`` is refused (422
``attachment_too_large``): such files are for the HTTP download, which streams them.
``open_attachment`` and ``open_raw`` are the checked openers that download uses.
"""

from __future__ import annotations

import base64
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from application.context import Context
from application.mail.access import visible_account_ids
from application.mail.content import Attachment, ContentReader
from application.mail.ports import BlobOwner, BlobStoreError
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.users import KNOWN_ROLES, User

NAME = "get-attachment"
RAW_CHUNK = 64 * 1024


class Payload(Base):
    message_id: str
    attachment_id: str


@dataclass(frozen=True)
class Download:
    """What to send: the name and type to announce, the size, and the bytes in chunks
    (read from the sealed blob while iterated)."""

    filename: str
    content_type: str
    size: int
    chunks: Generator[bytes, None, None]


def visible_message(ctx: Context, user: User, message_id: str) -> dict[str, Any] | Result:
    """The message's read-model row, or the error to answer with."""
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    row = ctx.mail.read_model.message(message_id)
    if (
        row is None
        or row["tenantId"] != user.tenant_id
        or (row["accountId"] not in visible_account_ids(ctx, user))
    ):
        return not_found(f"message {message_id}")
    return row


def _owner(row: dict[str, Any]) -> BlobOwner:
    return BlobOwner(row["tenantId"], row["accountId"])


def _reader(ctx: Context) -> ContentReader | None:
    return ctx.mail.content


def find_attachment(ctx: Context, row: dict[str, Any], attachment_id: str) -> Attachment | None:
    reader = _reader(ctx)
    if reader is None or not row["bodyRef"]:
        return None
    try:
        with ctx.mail.blobs.open(row["bodyRef"], owner=_owner(row)) as blob:
            content = reader.read(blob, message_id=row["messageId"])
    except BlobStoreError:
        return None
    return next((a for a in content.attachments if a.attachment_id == attachment_id), None)


def _attachment_chunks(
    ctx: Context, row: dict[str, Any], reader: ContentReader, attachment_id: str
) -> Generator[bytes, None, None]:
    with ctx.mail.blobs.open(row["bodyRef"], owner=_owner(row)) as blob:
        yield from reader.chunks(blob, attachment_id, message_id=row["messageId"])


def open_attachment(
    ctx: Context, user: User, message_id: str, attachment_id: str
) -> Download | Result:
    row = visible_message(ctx, user, message_id)
    if isinstance(row, Result):
        return row
    found = find_attachment(ctx, row, attachment_id)
    reader = _reader(ctx)
    if found is None or reader is None:
        return not_found(f"attachment {attachment_id[:100]}")
    chunks = _attachment_chunks(ctx, row, reader, attachment_id)
    return Download(found.filename, found.content_type, found.size, chunks)


def _raw_chunks(ctx: Context, row: dict[str, Any]) -> Generator[bytes, None, None]:
    with ctx.mail.blobs.open(row["bodyRef"], owner=_owner(row)) as blob:
        while chunk := blob.read(RAW_CHUNK):
            yield chunk


def open_raw(ctx: Context, user: User, message_id: str) -> Download | Result:
    """The message's raw MIME (``message/rfc822``); 404 when no body is stored."""
    row = visible_message(ctx, user, message_id)
    if isinstance(row, Result):
        return row
    if not row["bodyRef"]:
        return not_found(f"raw message {message_id}")
    try:  # opening checks the owner binding before anything is sent
        ctx.mail.blobs.open(row["bodyRef"], owner=_owner(row)).close()
    except BlobStoreError:
        return not_found(f"raw message {message_id}")
    size = int(row["sizeBytes"] or 0)
    return Download(f"{row['messageId']}.eml", "message/rfc822", size, _raw_chunks(ctx, row))


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    opened = open_attachment(ctx, user, payload.message_id, payload.attachment_id)
    if isinstance(opened, Result):
        return opened
    limit = ctx.policy.max_attachment_result_bytes
    if opened.size > limit:
        opened.chunks.close()  # never started: the blob was not opened
        return Result.fail(
            "attachment_too_large",
            422,
            "the attachment is over the answer's limit; download it over HTTP",
            size=opened.size,
            limitBytes=limit,
        )
    data = b"".join(opened.chunks)
    return Result.ok(
        {
            "messageId": payload.message_id,
            "attachmentId": payload.attachment_id,
            "filename": opened.filename,
            "contentType": opened.content_type,
            "size": len(data),
            "content": base64.b64encode(data).decode(),
            "contentEncoding": "base64",
        }
    )
