"""Turning sealed read-model rows into answers for a caller allowed to see them."""

from __future__ import annotations

from typing import Any

from application.context import Context
from application.mail.access import reveal, reveal_json
from application.mail.state import MailboxHealth
from application.privacy import ERASED


def account_view(ctx: Context, row: dict[str, Any], health: MailboxHealth | None) -> dict[str, Any]:
    owner = row["tenantId"], row["accountId"]
    imap = dict(row["imap"])
    imap["username"] = reveal(ctx, imap.get("username"), *owner) or ERASED
    health = health or MailboxHealth(row["accountId"])
    return {
        "accountId": row["accountId"],
        "provider": row["provider"],
        "displayName": reveal(ctx, row["displayName"], *owner) or ERASED,
        "address": reveal(ctx, row["address"], *owner) or ERASED,
        "scope": row["scope"],
        "ownerUserId": row["ownerUserId"],
        "authMethod": row["authMethod"],
        "imap": imap,
        "trustedAuthservId": row["trustedAuthservId"],
        "status": row["status"],
        "watchState": health.watch_state,
        "tier": health.tier,
        "health": {
            "lastSyncAt": health.last_sync_at.isoformat() if health.last_sync_at else None,
            "lastErrorKind": health.last_error_kind,
            "consecutiveFailures": health.consecutive_failures,
            "messageCount": row["messageCount"],
        },
    }


def message_view(ctx: Context, row: dict[str, Any]) -> dict[str, Any]:
    owner = row["tenantId"], row["accountId"]
    return {
        "messageId": row["messageId"],
        "accountId": row["accountId"],
        "threadKey": row["threadKey"],
        "providerMessageId": row["providerMessageId"],
        "messageIdHeader": reveal(ctx, row["messageIdHeader"], *owner) or None,
        "from": reveal_json(ctx, row["sender"], *owner, []),
        "to": reveal_json(ctx, row["to"], *owner, []),
        "cc": reveal_json(ctx, row["cc"], *owner, []),
        "subject": reveal(ctx, row["subject"], *owner) if row["subject"] else "",
        "snippet": reveal(ctx, row["snippet"], *owner) if row["snippet"] else "",
        "receivedAt": row["receivedAt"],
        "sizeBytes": row["sizeBytes"],
        "folder": row["folder"],
        "state": row["state"],
        "bodyRef": row["bodyRef"],
        # Mail retention erased its body, attachments and raw MIME (for good).
        "bodyErased": bool(row.get("bodyErased")),
    }
