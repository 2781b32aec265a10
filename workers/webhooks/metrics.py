"""The delivery loop's Prometheus metrics (in the worker's registry, or one of its own)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.delivered = Counter("tidings_webhook_delivered", "Deliveries answered 2xx", registry=r)
        self.retried = Counter("tidings_webhook_retried", "Failed attempts to retry", registry=r)
        self.dead = Counter("tidings_webhook_dead", "Deliveries out of retries", registry=r)
        self.latency = Histogram(
            "tidings_webhook_delivery_latency_seconds",
            "From the feed item's fan-out to its delivery",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600, 86400),
            registry=r,
        )
        self.backlog = Gauge(
            "tidings_webhook_backlog", "Pending deliveries", ["webhook_id"], registry=r
        )
