"""The delivery loop: turns feed items into deliveries and attempts them, fleet-wide.

Each turn does two things:

1. *Fan-out.* For every enabled webhook whose tenant's feed head is past its cursor,
   the matching items after the cursor become pending deliveries and the cursor
   moves, in one compare-and-set transaction (two workers never add the same items).
2. *Dispatch.* Due heads of their orders are claimed with a lease (one attempt at a
   time per delivery across the fleet) and posted from a thread pool. Endpoints are
   put in one of two lanes: an endpoint whose last attempt failed or took longer than
   ``slow_after`` seconds goes to the *slow lane*, a pool of its own, so slow or
   failing endpoints can only ever occupy that lane and never delay a healthy one. At
   most ``per_endpoint`` attempts per endpoint are in flight in this worker.

A failed attempt is retried after the retry policy's backoff until its budget is spent;
then the delivery is dead. The loop stops when its ``stop`` event is set, after the
attempts in flight finish (each is bounded by the request timeout).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from application.app import App
from application.privacy import KeyErased
from application.users import TENANT_ADMIN, User
from application.webhooks.access import SECRET_PURPOSE
from application.webhooks.signature import ATTEMPT_HEADER, EVENT_ID_HEADER, HEADER, sign
from domain.webhook import (
    DEAD,
    DELIVERED,
    PENDING,
    BadWebhookUrl,
    RetryPolicy,
    matches,
    order_key,
    parse_url,
)
from infrastructure.webhooks.sender import HttpSender, Outcome
from infrastructure.webhooks.store import Claimed, NewDelivery, SqlWebhookStore

log = logging.getLogger("tidings.webhooks")

FAN_OUT_PAGE = 500
FULL_FAN_OUT = 5.0


@dataclass(frozen=True)
class DispatchSettings:
    timeout: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    pool: int = 32
    slow_pool: int = 8
    per_endpoint: int = 2
    slow_after: float = 1.0
    interval: float = 0.2
    allow_private: bool = False

    @property
    def lease(self) -> float:
        """Longer than any attempt can take (the deadline plus resolving and a margin)."""
        return self.timeout * 2 + 30.0


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


class Dispatcher:
    def __init__(
        self,
        app: App,
        store: SqlWebhookStore,
        *,
        settings: DispatchSettings,
        holder: str,
        metrics: WebhookMetrics | None = None,
        sender: HttpSender | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.app = app
        self.store = store
        self.settings = settings
        self.holder = holder
        self.metrics = metrics or WebhookMetrics()
        self.sender = sender or HttpSender(
            timeout=settings.timeout, allow_private=settings.allow_private
        )
        self._jitter = jitter
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}  # webhook id -> attempts in flight here
        self._lanes = {"fast": 0, "slow": 0}
        self._slow: set[str] = set()
        self._wake = threading.Event()
        self._last_backlog = 0.0
        self._last_fan_out = 0.0
        self._last_full = 0.0
        self._fanned_at = -1

    # --- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        fast = ThreadPoolExecutor(self.settings.pool, thread_name_prefix="webhook")
        slow = ThreadPoolExecutor(self.settings.slow_pool, thread_name_prefix="webhook-slow")
        try:
            while not stop.is_set():
                try:
                    busy = self.turn(fast, slow)
                except Exception as error:  # a database hiccup: log, wait, go on
                    log.warning("webhooks.turn_failed error=%s", type(error).__name__)
                    busy = False
                if not busy:
                    self._wake.wait(self.settings.interval)
                    self._wake.clear()
        finally:
            fast.shutdown(wait=True)
            slow.shutdown(wait=True)

    def turn(self, fast: ThreadPoolExecutor, slow: ThreadPoolExecutor) -> bool:
        """A fan-out (at most once an ``interval``) and a dispatch; True when it started
        any attempt."""
        now = time.time()
        if now - self._last_fan_out >= self.settings.interval:
            self._last_fan_out = now
            position = self._feed_position()
            # Only a moved feed has new items, but a re-enabled webhook may be behind: a
            # full pass at least every FULL_FAN_OUT seconds.
            if position < 0 or position != self._fanned_at or now - self._last_full > FULL_FAN_OUT:
                self._last_full = now
                self.fan_out()
                self._fanned_at = position
        if now - self._last_backlog > 5.0:
            self._last_backlog = now
            self._publish_backlog()
        started = 0
        if not self.store.any_due(now):
            return False
        for lane, pool, size in (
            ("fast", fast, self.settings.pool),
            ("slow", slow, self.settings.slow_pool),
        ):
            with self._lock:
                free = size - self._lanes[lane]
                full = {w for w, n in self._in_flight.items() if n >= self.settings.per_endpoint}
                slow_ids = set(self._slow)
            if free <= 0:
                continue
            if lane == "fast":
                claimed = self.store.claim(
                    self.holder, now, self.settings.lease, free, exclude=full | slow_ids
                )
            else:
                claimed = self.store.claim(
                    self.holder,
                    now,
                    self.settings.lease,
                    free,
                    exclude=full,
                    only=slow_ids - full,
                )
            for item in claimed:
                with self._lock:
                    wid = item.delivery.webhook_id
                    self._in_flight[wid] = self._in_flight.get(wid, 0) + 1
                    self._lanes[lane] += 1
                future = pool.submit(self.attempt, item)
                future.add_done_callback(self._done(item, lane))
                started += 1
        return started > 0

    def _done(self, item: Claimed, lane: str) -> Callable[[Future[Any]], None]:
        def done(future: Future[Any]) -> None:
            with self._lock:
                wid = item.delivery.webhook_id
                self._in_flight[wid] -= 1
                if not self._in_flight[wid]:
                    del self._in_flight[wid]
                self._lanes[lane] -= 1
            if future.exception() is not None:
                log.warning("webhooks.attempt_bug error=%s", type(future.exception()).__name__)
            self._wake.set()

        return done

    # --- fan-out -----------------------------------------------------------------------

    def fan_out(self) -> int:
        """Turn new feed items into deliveries for every webhook; how many were added."""
        added = 0
        heads: dict[str, int] = {}
        for webhook in self.store.enabled_webhooks():
            tenant = webhook.tenant_id
            if tenant not in heads:
                heads[tenant] = self.app.ctx.feed.head(tenant)
            cursor = webhook.cursor
            while cursor < heads[tenant]:
                rows = self.app.ctx.feed.items(tenant, cursor, FAN_OUT_PAGE)
                if not rows:
                    break
                new = [
                    NewDelivery(
                        int(row["sequence"]), row["id"], row["type"], order_key(row["accountId"])
                    )
                    for row in rows
                    if matches(webhook.events, row["type"])
                ]
                last = int(rows[-1]["sequence"])
                if not self.store.fan_out(webhook.webhook_id, cursor, last, new, time.time()):
                    break  # another worker moved this webhook's cursor first
                added += len(new)
                cursor = last
        return added

    # --- one attempt -------------------------------------------------------------------

    def attempt(self, item: Claimed) -> None:
        d = item.delivery
        outcome = self._post(item)
        now = time.time()
        with self._lock:
            slow = outcome.status is None or outcome.error is not None
            if slow or outcome.seconds > self.settings.slow_after:
                self._slow.add(d.webhook_id)
            else:
                self._slow.discard(d.webhook_id)
        if outcome.status is not None and outcome.error is None:
            if self.store.finish(
                item,
                self.holder,
                state=DELIVERED,
                next_at=now,
                status=outcome.status,
                error=None,
                now=now,
            ):
                self.metrics.delivered.inc()
                self.metrics.latency.observe(max(now - d.created_at, 0.0))
            return
        first = self.store.first_attempt_at(d.delivery_id) or now
        delay = self.settings.retry.next_delay(item.attempt, now - first, self._jitter)
        state = DEAD if delay is None else PENDING
        recorded = self.store.finish(
            item,
            self.holder,
            state=state,
            next_at=now + (delay or 0.0),
            status=outcome.status,
            error=_printable(outcome.error or "failed"),
            now=now,
        )
        if recorded:
            (self.metrics.dead if state == DEAD else self.metrics.retried).inc()
        log.info(
            "webhooks.attempt_failed webhook_id=%s delivery_id=%s attempt=%d status=%s"
            " error=%s state=%s",
            d.webhook_id,
            d.delivery_id,
            item.attempt,
            outcome.status,
            _printable(outcome.error or "")[:60],
            state,
        )

    def _post(self, item: Claimed) -> Outcome:
        d = item.delivery
        try:
            target = parse_url(item.url)
        except BadWebhookUrl:
            return Outcome(None, "bad url", 0.0)
        try:
            secret = self.app.ctx.cipher.reveal(
                item.sealed_secret, d.tenant_id, None, SECRET_PURPOSE
            )
        except KeyErased:
            secret = None
        if secret is None:
            return Outcome(None, "secret unreadable", 0.0)
        body = self._body(d.tenant_id, d.sequence)
        if body is None:
            return Outcome(None, "feed item unreadable", 0.0)
        timestamp = int(time.time())
        headers = {
            EVENT_ID_HEADER: d.item_id,
            ATTEMPT_HEADER: str(item.attempt),
            HEADER: sign(secret, body, timestamp),
        }
        return self.sender.post(target, body, headers)

    def _body(self, tenant_id: str, sequence: int) -> bytes | None:
        reader = User(id="webhooks", tenant_id=tenant_id, roles=frozenset({TENANT_ADMIN}))
        result = self.app.query("read-feed", {"after": sequence - 1, "limit": 1}, reader)
        if not result.is_success or result.data is None:
            return None
        items = result.data["items"]
        if not items or items[0]["sequence"] != sequence:
            return None
        return orjson.dumps(items[0])

    def _feed_position(self) -> int:
        """The feed read model's position in the log (-1 when it is not known)."""
        for status in self.app.projections.status():
            if status.name == "feed":
                return status.position
        return -1

    def _publish_backlog(self) -> None:
        backlog = self.store.backlog()
        self.metrics.backlog.clear()
        for webhook_id, count in backlog.items():
            self.metrics.backlog.labels(webhook_id=webhook_id).set(count)


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)[:200]


__all__ = ["PENDING", "DispatchSettings", "Dispatcher", "WebhookMetrics"]
