"""The delivery loop: turns feed items into deliveries and attempts them, fleet-wide.

1. *Fan-out*, in a thread of its own, every ``interval`` when the feed moved: for every
   enabled webhook whose tenant's feed head is past its cursor, the matching items
   after the cursor become pending deliveries and the cursor moves, in one
   compare-and-set transaction (two workers never add the same items).

Each turn of the loop then does two things:

2. *Outcomes.* The attempts that finished since the last turn are recorded together,
   in one transaction (a finished head makes the next delivery of its order due).
3. *Dispatch.* Due heads of their orders are claimed with a lease (one attempt at a
   time per delivery across the fleet), for both lanes in one transaction; their feed
   items are read in one query and they are posted from thread pools, each attempt's
   outcome queued for the loop to record, so an endpoint that hangs holds only its own.
   Which lane an endpoint's attempts take (a healthy one's *fast* pool, or the *slow*
   pool for endpoints that failed or were slow), how much each lane may claim and how
   many attempts one endpoint (a tenant's scheme, host and port) and one tenant may
   have in flight is the pure policy ``workers.policies.webhook_lanes``.

A failed attempt is retried after the retry policy's backoff until its budget is spent;
then the delivery is dead. The loop stops when its ``stop`` event is set, after the
attempts in flight finish (each is bounded by the request timeout) and their outcomes
are recorded.

Every collaborator is injected (``DeliveryPorts``, wired by the composition root): the
delivery queue over the webhook tables, the feed's read model (its items, how one is
served, its position in the log), the cipher that opens a webhook's secret, and the
sender of the signed POST.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from application.feed.ports import FeedReadModel
from application.ports import Projections
from application.privacy import KeyErased, PiiCipher
from application.webhooks.access import SECRET_PURPOSE
from application.webhooks.delivery_ports import (
    Claimed,
    DeliveryQueue,
    Finished,
    NewDelivery,
    Outcome,
    WebhookSender,
)
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
from workers.policies.webhook_lanes import FAST, SLOW, LaneName, LanePolicy, LaneSettings
from workers.webhooks.metrics import WebhookMetrics

log = logging.getLogger("tidings.webhooks")

FAN_OUT_PAGE = 500
FULL_FAN_OUT = 5.0
RECORD_BATCH = 500
BACKLOG_EVERY = 5.0


@dataclass(frozen=True)
class DispatchSettings:
    timeout: float = 10.0  # one attempt's deadline (the sender's)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    lanes: LaneSettings = field(default_factory=LaneSettings)
    interval: float = 0.2
    # A claim's lease, renewed every third of it while its attempt runs: a dead
    # process's claims are due again within one ttl, whatever the attempt's deadline.
    lease_ttl: float = 8.0


@dataclass(frozen=True)
class DeliveryPorts:
    """The delivery loop's collaborators."""

    deliveries: DeliveryQueue
    feed: FeedReadModel
    serve: Callable[[dict[str, Any]], dict[str, Any]]  # a feed row as its tenant is served it
    projections: Projections  # where the feed read model is in the log
    cipher: PiiCipher  # opens a webhook's sealed secret
    sender: WebhookSender


class Dispatcher:
    def __init__(
        self,
        ports: DeliveryPorts,
        *,
        settings: DispatchSettings,
        holder: str,
        metrics: WebhookMetrics,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.ports = ports
        self.deliveries = ports.deliveries
        self.settings = settings
        self.holder = holder
        self.metrics = metrics
        self._jitter = jitter
        self._lock = threading.Lock()  # guards the lane policy (the loop and the pools)
        self._lanes = LanePolicy(settings.lanes)
        self._outcomes: queue.SimpleQueue[tuple[Claimed, Outcome]] = queue.SimpleQueue()
        # Claims whose outcome is not recorded yet (the loop's own: only it touches it).
        self._held: dict[str, Claimed] = {}
        self._renewed_at = 0.0
        self._wake = threading.Event()
        self._last_backlog = 0.0
        self._last_full = 0.0
        self._fanned_at = -1

    # --- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        lanes = self.settings.lanes
        fast = ThreadPoolExecutor(lanes.fast_pool, thread_name_prefix="webhook")
        slow = ThreadPoolExecutor(lanes.slow_pool, thread_name_prefix="webhook-slow")
        feeder = threading.Thread(
            target=self._feed, args=(stop,), name="webhook-fan-out", daemon=True
        )
        feeder.start()
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
            self._drain()
            fast.shutdown(wait=True)
            slow.shutdown(wait=True)
            feeder.join()
            try:  # the attempts that finished since the last turn
                self.record()
            except Exception as error:
                log.warning("webhooks.record_failed error=%s", type(error).__name__)

    def _drain(self) -> None:
        """On the way out: record the running attempts' outcomes as they come, keeping
        their leases renewed, until each has met its deadline."""
        deadline = time.monotonic() + self.settings.timeout + 5.0
        while self._held and time.monotonic() < deadline:
            try:
                self.record()
                self.renew_if_due()
            except Exception as error:  # a database hiccup: the leases lapse, at least once
                log.warning("webhooks.drain_failed error=%s", type(error).__name__)
            self._wake.wait(self.settings.interval)
            self._wake.clear()

    def _feed(self, stop: threading.Event) -> None:
        """Fan-out (and the backlog gauge) in a thread of its own, so that reading the
        feed and counting the backlog never delay the recording and claiming of
        attempts."""
        while not stop.is_set():
            try:
                if self.fan_out_if_moved():
                    self._wake.set()
                if time.time() - self._last_backlog > BACKLOG_EVERY:
                    self._last_backlog = time.time()
                    self._publish_backlog()
            except Exception as error:  # a database hiccup: log, wait, go on
                log.warning("webhooks.fan_out_failed error=%s", type(error).__name__)
            stop.wait(self.settings.interval)

    def fan_out_if_moved(self) -> int:
        """A fan-out when the feed moved (or a full one every ``FULL_FAN_OUT`` seconds:
        a re-enabled webhook may be behind); how many deliveries it added."""
        now = time.time()
        position = self._feed_position()
        if position >= 0 and position == self._fanned_at and now - self._last_full <= FULL_FAN_OUT:
            return 0
        self._last_full = now
        added = self.fan_out()
        self._fanned_at = position
        return added

    def turn(self, fast: ThreadPoolExecutor, slow: ThreadPoolExecutor) -> bool:
        """The outcomes that came in recorded and a dispatch; True when it recorded or
        started any attempt."""
        recorded = self.record()
        self.renew_if_due()
        return self.dispatch(fast, slow) + recorded > 0

    def renew_if_due(self) -> None:
        """Renew the leases of the attempts still running, every third of the ttl."""
        now = time.time()
        if not self._held or now - self._renewed_at < self.settings.lease_ttl / 3:
            return
        self.deliveries.renew(self.holder, list(self._held.values()), now + self.settings.lease_ttl)
        self._renewed_at = now

    def dispatch(self, fast: ThreadPoolExecutor, slow: ThreadPoolExecutor) -> int:
        """Claim due heads for both lanes in one transaction, read their feed items in
        one query and start their attempts; how many were started."""
        with self._lock:
            plan = self._lanes.plan()
        if plan is None:
            return 0
        now = time.time()
        if not self.deliveries.any_due(now):
            return 0
        fast_claimed, slow_claimed = self.deliveries.claim(
            self.holder,
            now,
            self.settings.lease_ttl,
            [plan.fast, plan.slow],
            plan.quota,
        )
        bodies = self._bodies([*fast_claimed, *slow_claimed])
        lanes: tuple[tuple[LaneName, ThreadPoolExecutor, list[Claimed]], ...] = (
            (FAST, fast, fast_claimed),
            (SLOW, slow, slow_claimed),
        )
        if not self._held:
            self._renewed_at = now  # the claim's own lease is fresh
        for lane, pool, claimed in lanes:
            for item in claimed:
                self._held[item.delivery.delivery_id] = item
                with self._lock:
                    self._lanes.started(item, lane, now)
                body = bodies.get((item.delivery.tenant_id, item.delivery.sequence))
                pool.submit(self._attempt, item, body, lane)
        return len(fast_claimed) + len(slow_claimed)

    def _attempt(self, item: Claimed, body: bytes | None, lane: LaneName) -> None:
        """One attempt in a pool thread; its outcome goes to the loop to record."""
        try:
            outcome = self._post(item, body)
        except Exception as error:  # a bug: the attempt counts as failed, never lost
            log.warning("webhooks.attempt_bug error=%s", type(error).__name__)
            outcome = Outcome(None, "internal error", 0.0)
        with self._lock:
            self._lanes.finished(item, lane, outcome)
        self._outcomes.put((item, outcome))
        self._wake.set()

    # --- fan-out -----------------------------------------------------------------------

    def fan_out(self) -> int:
        """Turn new feed items into deliveries for every webhook; how many were added."""
        added = 0
        webhooks = self.deliveries.enabled_webhooks()
        heads = self.ports.feed.heads({w.tenant_id for w in webhooks})
        for webhook in webhooks:
            tenant = webhook.tenant_id
            cursor = webhook.cursor
            while cursor < heads.get(tenant, 0):
                rows = self.ports.feed.items(tenant, cursor, FAN_OUT_PAGE)
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
                if not self.deliveries.fan_out(webhook.webhook_id, cursor, last, new, time.time()):
                    break  # another worker moved this webhook's cursor first
                added += len(new)
                cursor = last
        return added

    # --- outcomes ----------------------------------------------------------------------

    def record(self) -> int:
        """Record the outcomes that came in, in one transaction; how many there were."""
        done: list[tuple[Claimed, Outcome]] = []
        while len(done) < RECORD_BATCH:
            try:
                done.append(self._outcomes.get_nowait())
            except queue.Empty:
                break
        if not done:
            return 0
        now = time.time()
        finished = [self._finished(item, outcome, now) for item, outcome in done]
        try:
            recorded = self.deliveries.finish(self.holder, finished)
        except Exception:
            for pair in done:  # kept for the next turn: the leases still hold them
                self._outcomes.put(pair)
            raise
        for f, (item, outcome), kept in zip(finished, done, recorded, strict=True):
            self._held.pop(item.delivery.delivery_id, None)
            self._account(f, item, outcome, kept, now)
        return len(done)

    def _finished(self, item: Claimed, outcome: Outcome, now: float) -> Finished:
        if outcome.status is not None and outcome.error is None:
            return Finished(item, DELIVERED, now, outcome.status, None, now)
        delay = self.settings.retry.next_delay(item.attempt, now - item.first_at, self._jitter)
        return Finished(
            item,
            DEAD if delay is None else PENDING,
            now + (delay or 0.0),
            outcome.status,
            _printable(outcome.error or "failed"),
            now,
        )

    def _account(
        self, finished: Finished, item: Claimed, outcome: Outcome, kept: bool, now: float
    ) -> None:
        d = item.delivery
        if finished.state == DELIVERED:
            if kept:
                self.metrics.delivered.inc()
                self.metrics.latency.observe(max(now - d.created_at, 0.0))
            return
        if kept:
            (self.metrics.dead if finished.state == DEAD else self.metrics.retried).inc()
        log.info(
            "webhooks.attempt_failed webhook_id=%s delivery_id=%s attempt=%d status=%s"
            " error=%s state=%s",
            d.webhook_id,
            d.delivery_id,
            item.attempt,
            outcome.status,
            _printable(outcome.error or "")[:60],
            finished.state,
        )

    # --- one attempt -------------------------------------------------------------------

    def _post(self, item: Claimed, body: bytes | None) -> Outcome:
        d = item.delivery
        try:
            target = parse_url(item.url)
        except BadWebhookUrl:
            return Outcome(None, "bad url", 0.0)
        try:
            secret = self.ports.cipher.reveal(item.sealed_secret, d.tenant_id, None, SECRET_PURPOSE)
        except KeyErased:
            secret = None
        if secret is None:
            return Outcome(None, "secret unreadable", 0.0)
        if body is None:
            return Outcome(None, "feed item unreadable", 0.0)
        timestamp = int(time.time())
        headers = {
            EVENT_ID_HEADER: d.item_id,
            ATTEMPT_HEADER: str(item.attempt),
            HEADER: sign(secret, body, timestamp),
        }
        return self.ports.sender.post(target, body, headers)

    def _bodies(self, claimed: list[Claimed]) -> dict[tuple[str, int], bytes]:
        """The feed items of a batch, as served to the tenant, read in one query."""
        if not claimed:
            return {}
        keys = {(c.delivery.tenant_id, c.delivery.sequence) for c in claimed}
        bodies: dict[tuple[str, int], bytes] = {}
        for row in self.ports.feed.items_at(keys):
            try:
                item = self.ports.serve(row)
            except Exception as error:  # one unreadable item never blocks the batch
                log.warning("webhooks.item_unreadable error=%s", type(error).__name__)
                continue
            bodies[(row["tenantId"], int(row["sequence"]))] = orjson.dumps(item)
        return bodies

    def _feed_position(self) -> int:
        """The feed read model's position in the log (-1 when it is not known)."""
        for status in self.ports.projections.status():
            if status.name == "feed":
                return status.position
        return -1

    def _publish_backlog(self) -> None:
        backlog = self.deliveries.backlog()
        self.metrics.backlog.clear()
        for webhook_id, count in backlog.items():
            self.metrics.backlog.labels(webhook_id=webhook_id).set(count)


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)[:200]
