"""Resolve an IMAP host and apply the destination rule (``application.destinations``).

``check_host_allowed`` is the one function every outbound connection path calls: the
account handlers when a host is given, and ``DestinationCheckedProvider`` before each
connection (DNS answers change between connect time and a later poll), which then connects
to an address the check approved, never resolving the name a second time. Resolution runs
under a deadline, so a resolver that never answers cannot hold a request or a worker
thread.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from application.destinations import (
    DestinationPolicy,
    HostUnresolved,
    IpAddress,
    check_addresses,
)
from application.mail.ports import (
    Credentials,
    ImapEndpoint,
    MailboxSession,
    MailProvider,
    OpenOptions,
)

RESOLVE_TIMEOUT = 10.0


Lookup = Callable[..., list[Any]]


def resolve(
    host: str,
    port: int,
    timeout: float = RESOLVE_TIMEOUT,
    lookup: Lookup = socket.getaddrinfo,
) -> list[IpAddress]:
    """Every address ``host`` resolves to (an IP literal is its own answer); raise
    ``HostUnresolved`` when there is none within ``timeout`` seconds."""
    literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return [ipaddress.ip_address(literal.split("%", 1)[0])]
    except ValueError:
        pass
    answer: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            answer.extend(lookup(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as error:
            failure.append(error)

    # getaddrinfo has no timeout of its own; a daemon thread lets the caller move on.
    thread = threading.Thread(target=run, name="resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive() or failure or not answer:
        raise HostUnresolved(f"host {host!r} could not be resolved")
    addresses: list[IpAddress] = []
    for *_, sockaddr in answer:
        try:
            addresses.append(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
        except ValueError:
            continue
    if not addresses:
        raise HostUnresolved(f"host {host!r} has no IP address")
    return addresses


def check_host_allowed(host: str, port: int, allow_private: bool) -> None:
    """Raise ``HostNotAllowed`` when ``host`` resolves to an internal address (unless
    ``allow_private``), ``HostUnresolved`` when it does not resolve."""
    if allow_private:
        return
    check_addresses(host, resolve(host, port))


class ResolvingDestinationPolicy:
    """Implements ``DestinationPolicy`` with the system resolver (``lookup``)."""

    def __init__(self, *, allow_private: bool, lookup: Lookup = socket.getaddrinfo) -> None:
        self.allow_private = allow_private
        self._lookup = lookup

    def check(self, host: str, port: int) -> None:
        self.approved(host, port)

    def approved(self, host: str, port: int) -> tuple[IpAddress, ...]:
        if self.allow_private:
            return ()
        addresses = resolve(host, port, lookup=self._lookup)
        check_addresses(host, addresses)
        return tuple(addresses)


class DestinationCheckedProvider:
    """A ``MailProvider`` that checks the destination before every connection and pins
    the connection to the approved addresses."""

    def __init__(self, inner: MailProvider, policy: DestinationPolicy) -> None:
        self._inner = inner
        self._policy = policy

    def open(
        self, endpoint: ImapEndpoint, credentials: Credentials, options: OpenOptions
    ) -> MailboxSession:
        approved = self._policy.approved(endpoint.host, endpoint.port)
        if approved:
            endpoint = replace(endpoint, addresses=tuple(str(a) for a in approved))
        return self._inner.open(endpoint, credentials, options)


__all__ = [
    "DestinationCheckedProvider",
    "ResolvingDestinationPolicy",
    "check_host_allowed",
    "resolve",
]
