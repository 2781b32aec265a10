"""Webhooks: which feed items an endpoint receives, and when a failed delivery is tried again.

A webhook is a tenant's subscription of one URL to some feed item types. Each matching
feed item becomes one delivery, whose state machine is

    pending --2xx--> delivered (final)
    pending --failure, budget left--> pending (next attempt after a backoff)
    pending --failure, budget spent--> dead
    delivered | dead --redeliver--> pending (attempts start again)

Order is kept per webhook and *order key* (the item's mail account, or the tenant for
items without one): a delivery is attempted only when every earlier delivery of its
webhook and key is delivered or dead. The rules here are pure: time is passed in,
randomness is a parameter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from domain.errors import DomainError

PENDING, DELIVERED, DEAD = "pending", "delivered", "dead"
STATES = (PENDING, DELIVERED, DEAD)

MAX_URL_LENGTH = 2048
MAX_EVENT_FILTERS = 32
_FILTER = re.compile(r"[a-z_]+(\.[a-z_]+)?\.?|\*")


class WebhookError(DomainError):
    pass


class BadWebhookUrl(WebhookError):
    """The URL is not an absolute http(s) URL with a host (the message says what)."""


class BadEventFilter(WebhookError):
    pass


@dataclass(frozen=True)
class Target:
    """Where a delivery goes: the parts of a checked URL."""

    scheme: str
    host: str
    port: int
    path: str  # path and query, at least "/"

    @property
    def destination(self) -> str:
        """Scheme, host and port: where attempts are counted and remembered, whatever
        the path (the host without a trailing dot, as DNS reads it)."""
        host = self.host.rstrip(".")
        return (
            f"{self.scheme}://[{host}]:{self.port}"
            if ":" in host
            else f"{self.scheme}://{host}:{self.port}"
        )


def parse_url(url: str) -> Target:
    """Accept only absolute ``http``/``https`` URLs with a host, no credentials and no
    fragment; raise ``BadWebhookUrl`` otherwise."""
    if len(url) > MAX_URL_LENGTH or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise BadWebhookUrl("the URL is too long or contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise BadWebhookUrl("the URL cannot be parsed") from None
    if parts.scheme not in ("http", "https"):
        raise BadWebhookUrl("only http and https URLs are accepted")
    if not parts.hostname:
        raise BadWebhookUrl("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise BadWebhookUrl("the URL must not carry credentials")
    if parts.fragment:
        raise BadWebhookUrl("the URL must not have a fragment")
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    default = 443 if parts.scheme == "https" else 80
    return Target(parts.scheme, parts.hostname, port or default, path)


def check_filters(filters: Sequence[str]) -> list[str]:
    """The filters, deduplicated and sorted: exact types (``message.received``),
    prefixes ending in a dot (``mail_account.``) or ``*`` for every item."""
    if not filters or len(filters) > MAX_EVENT_FILTERS:
        raise BadEventFilter(f"give between 1 and {MAX_EVENT_FILTERS} event filters")
    for item in filters:
        if not _FILTER.fullmatch(item):
            raise BadEventFilter(f"not a type, a prefix ending in '.', or '*': {item[:64]!r}")
    return sorted(set(filters))


def matches(filters: Sequence[str], item_type: str) -> bool:
    for item in filters:
        if item in {"*", item_type} or (item.endswith(".") and item_type.startswith(item)):
            return True
    return False


def order_key(account_id: str | None) -> str:
    """The sequence an item is ordered in, within its webhook: its account, else the tenant's."""
    return account_id or ""


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: the n-th retry waits between half and all of
    ``first * 2**(n-1)`` (at most ``longest``); a delivery whose next attempt would fall
    past ``budget`` seconds after its first one is dead instead."""

    first: float = 5.0
    longest: float = 3600.0
    budget: float = 24 * 3600.0

    def next_delay(
        self, attempts: int, elapsed: float, random: Callable[[], float]
    ) -> float | None:
        """Seconds until the next attempt after ``attempts`` failed ones, ``elapsed``
        seconds after the first; None when the delivery is dead."""
        ceiling = min(self.first * 2 ** max(attempts - 1, 0), self.longest)
        delay = float(ceiling * (0.5 + 0.5 * random()))
        if elapsed + delay > self.budget:
            return None
        return delay


def is_success(status: int) -> bool:
    """Only 2xx counts; a redirect is not followed and not a success."""
    return 200 <= status < 300
