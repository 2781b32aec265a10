"""What the webhook delivery loop (``workers.webhooks``) needs from its adapters: the
delivery queue over the webhook tables and the signed POST, with the values they pass.

The queue's rules (one pending head per order, leases on claims, outcomes recorded only
by the lease's holder) are its adapter's (``infrastructure.webhooks``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from application.webhooks.ports import DeliveryRecord, WebhookRecord
from domain.webhook import Target


@dataclass(frozen=True)
class NewDelivery:
    sequence: int
    item_id: str
    item_type: str
    order_key: str


class Endpoint(NamedTuple):
    """What attempts are counted and remembered by: a tenant's destination (the scheme,
    host and port of a webhook's URL), whatever the webhook's id or path."""

    tenant_id: str
    destination: str


@dataclass(frozen=True)
class Claimed:
    delivery: DeliveryRecord
    url: str
    sealed_secret: str
    attempt: int  # this attempt's number (1 for the first)
    first_at: float  # when its first attempt was claimed (the retry budget's start)
    destination: str  # the URL's scheme, host and port (``Target.destination``)

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.delivery.tenant_id, self.destination)


@dataclass(frozen=True)
class Lane:
    """One lane's share of a claim: up to ``limit`` heads, never of an endpoint in
    ``exclude`` nor of a tenant in ``exclude_tenants`` and, when ``only`` is given, only
    of those endpoints. With ``turns`` (endpoint -> when it last had an attempt), the
    lane takes turns: every due head of ``only`` is a candidate and the endpoints
    waiting longest go first, so a backlog fanned out early cannot keep a later endpoint
    waiting until it is drained."""

    limit: int
    exclude: Collection[Endpoint] = ()
    only: Collection[Endpoint] | None = None
    exclude_tenants: Collection[str] = ()
    turns: Mapping[Endpoint, float] | None = None


class Admission(Protocol):
    def admit(self, lane: int, endpoint: Endpoint) -> bool:
        """Whether one more attempt at ``endpoint`` may be claimed for the lane at index
        ``lane`` of the claim; when it may, the attempt is counted."""
        ...


@dataclass(frozen=True)
class Finished:
    """An attempt's outcome to record."""

    claimed: Claimed
    state: str
    next_at: float
    status: int | None
    error: str | None
    at: float


@dataclass(frozen=True)
class Outcome:
    """What one POST came to."""

    status: int | None  # None: no HTTP answer (refused, timed out, bad destination)
    error: str | None  # a short reason when not 2xx
    seconds: float


class DeliveryQueue(Protocol):
    def enabled_webhooks(self) -> list[WebhookRecord]: ...

    def fan_out(
        self, webhook_id: str, seen: int, cursor: int, new: Sequence[NewDelivery], now: float
    ) -> bool:
        """Add ``new`` and move the webhook's cursor from ``seen`` to ``cursor`` in one
        transaction; False (nothing written) when another worker moved it first."""
        ...

    def claim(
        self,
        holder: str,
        now: float,
        lease: float,
        lanes: Sequence[Lane],
        admission: Admission | None = None,
    ) -> list[list[Claimed]]:
        """Lease due heads of their orders to ``holder`` for ``lease`` seconds, for each
        lane its share, all in one transaction; each head only when ``admission``
        admits it (the candidates in the lane's order: a head refused leaves its place
        to the next)."""
        ...

    def any_due(self, now: float) -> bool:
        """Whether some head is due and not leased."""
        ...

    def renew(self, holder: str, claims: Sequence[Claimed], until: float) -> int:
        """Move the leases ``holder`` still holds on ``claims`` (their attempt as claimed)
        to ``until``; how many it still held."""
        ...

    def finish(self, holder: str, outcomes: Sequence[Finished]) -> list[bool]:
        """Record attempts' outcomes in one transaction; for each, False when its lease
        was lost meanwhile (nothing written for it)."""
        ...

    def backlog(self) -> dict[str, int]:
        """Pending deliveries per webhook."""
        ...


class WebhookSender(Protocol):
    def post(self, target: Target, body: bytes, headers: dict[str, str]) -> Outcome:
        """POST ``body`` to ``target`` under the sender's deadline; never raises for the
        endpoint's sake (a refusal, a timeout or a bad destination is an ``Outcome``)."""
        ...
