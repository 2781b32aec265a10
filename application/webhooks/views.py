"""How webhooks and deliveries are shown to callers (never the secret)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from application.webhooks.ports import DeliveryRecord, WebhookRecord


def _time(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()


def webhook_view(record: WebhookRecord) -> dict[str, Any]:
    return {
        "webhookId": record.webhook_id,
        "url": record.url,
        "events": record.events,
        "description": record.description,
        "enabled": record.enabled,
        "createdAt": record.created_at,
    }


def delivery_view(record: DeliveryRecord) -> dict[str, Any]:
    return {
        "deliveryId": record.delivery_id,
        "webhookId": record.webhook_id,
        "sequence": record.sequence,
        "eventId": record.item_id,
        "type": record.item_type,
        "state": record.state,
        "attempts": record.attempts,
        "createdAt": _time(record.created_at),
        "nextAttemptAt": _time(record.next_at) if record.state == "pending" else None,
        "lastStatus": record.last_status,
        "lastError": record.last_error,
        "deliveredAt": _time(record.delivered_at),
    }
