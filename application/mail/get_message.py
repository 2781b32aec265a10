"""get-message: one message, with its raw MIME (base64) read from the blob store, its
plain text, its sanitized HTML and its attachment index.

The content is derived from the stored raw MIME on each read, in one bounded streaming
pass (``ContentReader``); a message without a stored body has ``text``/``html`` null and
no attachments. ``includeContent: false`` skips that pass.

Every stored body is returned, whatever its size: bodies over ``max_message_mb`` are
never stored, so that setting bounds this answer too. ``includeRaw: false`` skips it.
Only the message's own body is read: the blob store opens the ``bodyRef`` only as a blob
of the message's own account and tenant, so a ref naming anyone else's blob gives no raw.
A body erased by mail retention (``bodyErased``) has no ref left: no raw, no content.
"""

from __future__ import annotations

import base64
from typing import Any

from application.context import Context
from application.mail.access import visible_account_ids
from application.mail.ports import BlobOwner, BlobStoreError
from application.mail.views import message_view
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.users import KNOWN_ROLES, User

NAME = "get-message"


class Payload(Base):
    message_id: str
    include_raw: bool = True
    include_content: bool = True


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    row = ctx.mail.read_model.message(payload.message_id)
    if (
        row is None
        or row["tenantId"] != user.tenant_id
        or (row["accountId"] not in visible_account_ids(ctx, user))
    ):
        return not_found(f"message {payload.message_id}")
    view = message_view(ctx, row)
    view["raw"] = None
    if payload.include_raw and row["bodyRef"]:
        try:
            owner = BlobOwner(row["tenantId"], row["accountId"])
            with ctx.mail.blobs.open(row["bodyRef"], owner=owner) as blob:
                view["raw"] = base64.b64encode(blob.read()).decode()
        except BlobStoreError:
            view["raw"] = None
    view["rawEncoding"] = "base64"
    view.update(_content(ctx, row) if payload.include_content else _NO_CONTENT)
    return Result.ok(view)


_NO_CONTENT: dict[str, Any] = {
    "text": None,
    "html": None,
    "attachments": [],
    "contentTruncated": False,
}


def _content(ctx: Context, row: dict[str, Any]) -> dict[str, Any]:
    reader = ctx.mail.content
    if reader is None or not row["bodyRef"]:
        return dict(_NO_CONTENT)
    try:
        owner = BlobOwner(row["tenantId"], row["accountId"])
        with ctx.mail.blobs.open(row["bodyRef"], owner=owner) as blob:
            content = reader.read(blob, message_id=row["messageId"])
    except BlobStoreError:
        return dict(_NO_CONTENT)
    return {
        "text": content.text,
        "html": content.html,
        "attachments": [a.view() for a in content.attachments],
        "contentTruncated": content.truncated,
    }
