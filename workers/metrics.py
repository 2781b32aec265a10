"""The worker's Prometheus metrics, in a registry of its own (nothing at import time)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from application.mail.ports import (
    Credentials,
    ImapEndpoint,
    MailboxSession,
    MailProvider,
    OpenOptions,
)


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.accounts_owned = Gauge(
            "tidings_accounts_owned", "Hot accounts whose lease this worker holds", registry=r
        )
        self.watchers = Gauge("tidings_watchers", "IDLE watches by state", ["state"], registry=r)
        self.leases_renewed = Counter(
            "tidings_leases_renewed_total", "Lease renewals answered yes", registry=r
        )
        self.lease_renewals_failed = Counter(
            "tidings_lease_renewals_failed_total",
            "Lease renewal batches the lease backend did not answer",
            registry=r,
        )
        self.leases_lost = Counter(
            "tidings_leases_lost_total", "Leases lost or expired", ["reason"], registry=r
        )
        self.ingested = Counter(
            "tidings_messages_ingested_total", "Messages ingested", ["path"], registry=r
        )
        self.ingest_latency = Histogram(
            "tidings_watch_fetch_seconds",
            "EXISTS to ingested, on the watch path",
            registry=r,
            buckets=(0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10),
        )
        self.poll_seconds = Histogram(
            "tidings_poll_seconds",
            "One account's poll",
            registry=r,
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
        )
        self.poll_failures = Counter(
            "tidings_poll_failures_total", "Failed polls", ["kind"], registry=r
        )
        self.projection_lag = Gauge(
            "tidings_projection_lag_events", "Events not yet projected", ["projection"], registry=r
        )
        self.logins = Counter(
            "tidings_imap_logins_total", "IMAP logins (polls and watches)", registry=r
        )
        self.login_rate = Gauge(
            "tidings_watch_login_rate",
            "Watch logins a second, open to parked or IDLE, as measured (0: not yet)",
            registry=r,
        )
        self.watch_probes = Counter(
            "tidings_watch_probes_total",
            "IDLE liveness probes: sent, answered, unanswered (the watch restarts)",
            ["outcome"],
            registry=r,
        )

    def watches_seen(
        self,
        *,
        owned: int,
        states: Iterable[str],
        probes: Mapping[str, int],
        login_rate: float | None,
    ) -> None:
        """The watch gauges from one look at the watches (``states``: one per watch)."""
        self.accounts_owned.set(owned)
        counts: dict[str, int] = {}
        for state in states:
            counts[state] = counts.get(state, 0) + 1
        for state in ("opening", "parked", "idling", "fetching", "refreshing"):
            self.watchers.labels(state).set(counts.get(state, 0))
        for outcome, count in probes.items():
            self.watch_probes.labels(outcome).inc(count)
        self.login_rate.set(login_rate or 0.0)


class CountingProvider:
    """A ``MailProvider`` that reports every successful login (``on_login``): the one
    place both the polls' and the watches' sessions are opened."""

    def __init__(self, inner: MailProvider, on_login: Callable[[], None]) -> None:
        self._inner = inner
        self._on_login = on_login

    def open(
        self, endpoint: ImapEndpoint, credentials: Credentials, options: OpenOptions
    ) -> MailboxSession:
        session = self._inner.open(endpoint, credentials, options)
        self._on_login()
        return session
