"""Where a mail account may point: never at the inside of our own network.

An IMAP host is a caller's value, and connecting to it is a request we make on their
behalf: a host that resolves to loopback, a private range (RFC 1918, RFC 4193),
link-local, multicast, unspecified or any other non-global address would let a
tenant probe (or log in to) services behind our firewall. Such hosts are refused
unless ``TIDINGS_ALLOW_PRIVATE_HOSTS`` is set (the demo and the tests run servers on
loopback). The rule is pure, over addresses already resolved; resolving is the
adapter's job (``infrastructure.net_policy``), done again at every connection since
DNS answers change.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Protocol

from application.mail.ports import MailboxUnreachable, MailProviderError
from application.result import Result

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ALLOW_SETTING = "TIDINGS_ALLOW_PRIVATE_HOSTS"


class HostNotAllowed(MailProviderError):
    """The host resolves to an internal address. The message names the host only."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"host {host!r} resolves to an internal address; set {ALLOW_SETTING}=true to allow it"
        )
        self.host = host


class HostUnresolved(MailboxUnreachable):
    """The host has no address right now (or the resolver did not answer in time)."""


class DestinationPolicy(Protocol):
    def check(self, host: str, port: int) -> None:
        """Raise ``HostNotAllowed`` for an internal destination, ``HostUnresolved``
        when the host has no address."""
        ...

    def approved(self, host: str, port: int) -> tuple[IpAddress, ...]:
        """``check``, returning the addresses it approved for the connection to use, so
        a name cannot resolve to a public address for the check and a private one for
        the connection (empty when private hosts are allowed and nothing was resolved)."""
        ...


def is_internal(address: IpAddress) -> bool:
    """True for every address that is not on the public internet."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None and is_internal(embedded):
            return True
        if address.teredo is not None and is_internal(address.teredo[1]):
            return True
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or address.is_reserved
        or not address.is_global
    )


def check_addresses(host: str, addresses: Iterable[IpAddress]) -> None:
    """Refuse the host when any of its addresses is internal: a client may pick any."""
    if any(is_internal(address) for address in addresses):
        raise HostNotAllowed(host)


def host_not_allowed(error: HostNotAllowed) -> Result:
    return Result.fail(
        "host_not_allowed",
        422,
        f"the IMAP host does not resolve to a public address; set {ALLOW_SETTING}=true"
        " to allow private ones",
        host=error.host,
        setting=ALLOW_SETTING,
    )
