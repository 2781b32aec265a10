"""The table of known mail providers and the limits each sets, matched by IMAP host.

A provider's limits are what its documentation states a client must stay under:

- ``conn_cap``: IMAP connections one worker holds to the provider's host at once
  (Gmail and Outlook allow 15 simultaneous IMAP connections per account, Yahoo 10);
- ``daily_budget_bytes``: bytes of mail downloaded by IMAP per account per day (Gmail:
  2,500 MB a day); ``None`` = the provider documents no figure, so there is no budget;
- ``daily_send_limit``: messages one account may send per UTC day (Gmail: 2,000);
  ``None``: no limit of ours (the server still answers for its own);
- ``send_connections``: SMTP sessions one worker runs at once for one account (the
  lanes of its series; Gmail takes 10 to 15 concurrent sessions per account: 3 stays
  well inside, and so for Outlook); ``None``: the worker's default;
- ``saves_sent``: the provider keeps a copy of what was sent by SMTP in the Sent folder
  itself (Gmail, Outlook), so the sender appends none.

A host matches an entry by exact name or, for a ``*.``-pattern, by any subdomain. A host
matching no entry is ``UNKNOWN``: the worker's ``per_host_conn_cap`` and no budget.
Entries the operator adds (``extra``) take precedence over the built-in ones, so a
deployment can correct a figure or describe its own server (the tests add one for
127.0.0.1). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MB = 1000 * 1000


@dataclass(frozen=True, slots=True)
class ProviderLimits:
    name: str
    hosts: tuple[str, ...]
    """Exact host names, or ``*.domain`` for every subdomain of ``domain``."""
    conn_cap: int | None = None
    """Connections per host per worker; ``None``: the worker's ``per_host_conn_cap``."""
    daily_budget_bytes: int | None = None
    """Download budget per account per UTC day; ``None``: no budget."""
    daily_send_limit: int | None = None
    """Messages sent per account per UTC day; ``None``: no limit."""
    send_connections: int | None = None
    """SMTP sessions per account per worker at once; ``None``: the worker's default."""
    saves_sent: bool = False
    """The provider files a copy of every message sent by SMTP in Sent itself."""

    def __post_init__(self) -> None:
        if self.conn_cap is not None and self.conn_cap < 1:
            raise ValueError("a provider's connection cap is at least 1")
        if self.daily_budget_bytes is not None and self.daily_budget_bytes < 1:
            raise ValueError("a provider's daily budget is at least 1 byte")
        if self.daily_send_limit is not None and self.daily_send_limit < 1:
            raise ValueError("a provider's daily send limit is at least 1 message")
        if self.send_connections is not None and self.send_connections < 1:
            raise ValueError("a provider's SMTP sessions per account are at least 1")


UNKNOWN = ProviderLimits("unknown", ())

KNOWN_PROVIDERS: tuple[ProviderLimits, ...] = (
    ProviderLimits(
        "gmail",
        ("imap.gmail.com", "*.gmail.com", "imap.googlemail.com"),
        conn_cap=15,
        daily_budget_bytes=2500 * MB,
        daily_send_limit=2000,
        send_connections=3,
        saves_sent=True,
    ),
    ProviderLimits(
        "outlook",
        ("outlook.office365.com", "imap-mail.outlook.com", "*.outlook.com"),
        conn_cap=15,
        send_connections=3,
        saves_sent=True,
    ),
    ProviderLimits("yahoo", ("imap.mail.yahoo.com", "*.mail.yahoo.com"), conn_cap=10),
)


def normalise_host(host: str) -> str:
    """Hosts compare case-insensitively and without a trailing root dot."""
    return host.strip().lower().rstrip(".")


def _matches(pattern: str, host: str) -> bool:
    pattern = normalise_host(pattern)
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


class ProviderTable:
    """The built-in providers with the operator's ``extra`` entries in front."""

    def __init__(
        self,
        extra: Iterable[ProviderLimits] = (),
        known: Iterable[ProviderLimits] = KNOWN_PROVIDERS,
    ) -> None:
        self.entries: tuple[ProviderLimits, ...] = (*extra, *known)

    def match(self, host: str) -> ProviderLimits:
        host = normalise_host(host)
        # Exact names first, so an entry for one host beats another's wildcard.
        for entry in self.entries:
            if any(not p.startswith("*.") and _matches(p, host) for p in entry.hosts):
                return entry
        for entry in self.entries:
            if any(p.startswith("*.") and _matches(p, host) for p in entry.hosts):
                return entry
        return UNKNOWN

    def conn_cap(self, host: str, default: int) -> int:
        cap = self.match(host).conn_cap
        return default if cap is None else cap

    def send_connections(self, host: str, default: int) -> int:
        connections = self.match(host).send_connections
        return default if connections is None else connections

    def daily_budget(self, host: str) -> int | None:
        return self.match(host).daily_budget_bytes
