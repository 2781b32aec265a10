"""What the webhook use cases need from the webhook store (an SQL adapter implements it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class WebhookRecord:
    webhook_id: str
    tenant_id: str
    url: str
    events: list[str]
    description: str
    sealed_secret: str  # sealed under the tenant's key, purpose "webhook-secret"
    created_at: str
    enabled: bool = True
    cursor: int = 0  # the last feed sequence turned into deliveries


@dataclass(frozen=True)
class DeliveryRecord:
    delivery_id: str
    webhook_id: str
    tenant_id: str
    sequence: int
    item_id: str
    item_type: str
    order_key: str
    state: str
    attempts: int
    created_at: float
    next_at: float
    last_status: int | None
    last_error: str | None
    delivered_at: float | None


class WebhookStore(Protocol):
    def add(self, record: WebhookRecord, limit: int) -> int:
        """Add ``record`` unless its tenant has ``limit`` webhooks already; how many the
        tenant had before (nothing is added when that is ``limit`` or more). Two adds
        of one tenant never both pass the limit."""
        ...

    def get(self, tenant_id: str, webhook_id: str) -> WebhookRecord | None: ...

    def all_of(self, tenant_id: str) -> list[WebhookRecord]: ...

    def update(
        self,
        tenant_id: str,
        webhook_id: str,
        *,
        url: str | None,
        events: list[str] | None,
        description: str | None,
        enabled: bool | None,
    ) -> bool: ...

    def set_secret(self, tenant_id: str, webhook_id: str, sealed_secret: str) -> bool: ...

    def delete(self, tenant_id: str, webhook_id: str) -> bool:
        """Remove the webhook and its deliveries; False when there was none."""
        ...

    def deliveries(
        self, tenant_id: str, webhook_id: str, state: str | None, after: int, limit: int
    ) -> list[DeliveryRecord]:
        """Deliveries of one webhook with a sequence above ``after``, in sequence order."""
        ...

    def redeliver(self, tenant_id: str, delivery_id: str, now: float) -> DeliveryRecord | None:
        """Make a delivered or dead delivery pending again, due now, attempts reset."""
        ...
