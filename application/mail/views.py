"""Turning sealed read-model rows into answers for a caller allowed to see them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from application.context import Context
from application.mail.access import reveal, reveal_json
from application.mail.folder_state import FolderRow
from application.mail.state import MailboxHealth
from application.privacy import ERASED


def account_view(
    ctx: Context,
    row: dict[str, Any],
    health: MailboxHealth | None,
    folders: Sequence[FolderRow] = (),
) -> dict[str, Any]:
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
            "folders": [folder_health(folder) for folder in folders],
        },
    }


def folder_health(folder: FolderRow) -> dict[str, Any]:
    """One synced folder's sync health (INBOX's sync is the account's own, above)."""
    return {
        "name": folder.name,
        "role": "inbox" if folder.name == "INBOX" else folder.role,
        "listedAt": folder.listed_at.isoformat() if folder.listed_at else None,
        "lastSyncAt": folder.last_sync_at.isoformat() if folder.last_sync_at else None,
        "lastErrorKind": folder.last_error_kind,
        "consecutiveFailures": folder.consecutive_failures,
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
        "folders": json.loads(row["folders"]) if row["folders"] else [row["folder"]],
        "direction": row["direction"] or "inbound",
        "state": row["state"],
        "bodyRef": row["bodyRef"],
        # Mail retention erased its body, attachments and raw MIME (for good).
        "bodyErased": bool(row.get("bodyErased")),
        **flag_view(row),
    }


def flag_view(row: dict[str, Any]) -> dict[str, Any]:
    """A message row's flags (stored JSON, 0/1) as the API gives them."""
    flags = json.loads(row.get("flags") or "[]")
    return {
        "flags": flags,
        "unread": bool(row.get("unread", 1)),
        "flagged": bool(row.get("flagged", 0)),
    }
