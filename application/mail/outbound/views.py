"""The public shape of an outbound message (``list-outbound``, ``get-outbound``): the
read model's row with its sealed subject opened, internal columns left out."""

from __future__ import annotations

from typing import Any

from application.context import Context

_PUBLIC = (
    "outboundId",
    "accountId",
    "state",
    "recipients",
    "sizeBytes",
    "attempts",
    "queuedAt",
    "updatedAt",
    "nextAttemptAt",
    "lastReply",
    "errorKind",
    "sentCopy",
    "messageId",
)


def outbound_view(ctx: Context, row: dict[str, Any]) -> dict[str, Any]:
    view = {key: row[key] for key in _PUBLIC}
    view["subject"] = ctx.mail.cipher.reveal(row["subject"], row["tenantId"], row["accountId"])
    return view
