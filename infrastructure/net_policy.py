"""Resolve an IMAP host and apply the destination rule (``application.mail.destinations``).

``check_host_allowed`` is the one function every outbound connection path calls: the
account handlers when a host is given, and ``DestinationCheckedProvider`` before each
connection (DNS answers change between connect time and a later poll). Resolution runs
under a deadline, so a resolver that never answers cannot hold a request or a worker
thread.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any

from application.mail.destinations import (
    HostUnresolved,
    IpAddress,
    check_addresses,
)
from application.mail.ports import (
    BlobOwner,
    Credentials,
    ImapEndpoint,
    MailboxSession,
    MailProvider,
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
    """Implements ``DestinationPolicy`` with the system resolver."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private

    def check(self, host: str, port: int) -> None:
        check_host_allowed(host, port, self.allow_private)


class DestinationCheckedProvider:
    """A ``MailProvider`` that checks the destination before every connection."""

    def __init__(self, inner: MailProvider, policy: ResolvingDestinationPolicy) -> None:
        self._inner = inner
        self._policy = policy

    def open(
        self,
        endpoint: ImapEndpoint,
        credentials: Credentials,
        *,
        account_id: str,
        blob_owner: BlobOwner | None = None,
        deadline: float | None = None,
    ) -> MailboxSession:
        self._policy.check(endpoint.host, endpoint.port)
        return self._inner.open(
            endpoint, credentials, account_id=account_id, blob_owner=blob_owner, deadline=deadline
        )


__all__ = [
    "DestinationCheckedProvider",
    "ResolvingDestinationPolicy",
    "check_host_allowed",
    "resolve",
]
