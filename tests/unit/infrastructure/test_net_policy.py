"""Resolution for the destination check: literals need no resolver; a resolver that
fails, answers nothing or hangs makes ``HostUnresolved``; every answer is checked."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import pytest

from application.destinations import HostNotAllowed, HostUnresolved
from application.mail.ports import Credentials, ImapEndpoint, OpenOptions
from infrastructure.net_policy import (
    DestinationCheckedProvider,
    ResolvingDestinationPolicy,
    check_host_allowed,
    resolve,
)
from infrastructure.oauth.token_client import Pinned, pinned


def answers(*addresses: str) -> Any:
    def lookup(host: str, port: int, **_: Any) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

    return lookup


def test_ip_literals_are_their_own_answer() -> None:
    assert resolve("10.0.0.1", 143, lookup=answers()) == [ipaddress.ip_address("10.0.0.1")]
    assert resolve("[::1]", 143, lookup=answers()) == [ipaddress.ip_address("::1")]
    assert resolve("fe80::1%eth0", 143, lookup=answers()) == [ipaddress.ip_address("fe80::1")]


def test_every_address_of_a_name_is_returned() -> None:
    found = resolve("mail.example", 143, lookup=answers("93.184.216.34", "10.0.0.1"))
    assert found == [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.1")]


def failing(host: str, port: int, **_: Any) -> list[Any]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def idna_error(host: str, port: int, **_: Any) -> list[Any]:
    raise UnicodeError("label too long")


@pytest.mark.parametrize(
    "lookup", [failing, idna_error, answers()], ids=["gaierror", "idna", "empty"]
)
def test_a_host_that_does_not_resolve_is_unresolved(lookup: Any) -> None:
    with pytest.raises(HostUnresolved):
        resolve("mail.example", 143, lookup=lookup)


def test_a_resolver_that_hangs_is_cut_off_at_the_timeout() -> None:
    release = threading.Event()

    def hanging(host: str, port: int, **_: Any) -> list[Any]:
        release.wait(30)
        return []

    started = time.monotonic()
    with pytest.raises(HostUnresolved):
        resolve("mail.example", 143, timeout=0.2, lookup=hanging)
    assert time.monotonic() - started < 5
    release.set()


def test_allowing_private_hosts_skips_the_check() -> None:
    check_host_allowed("127.0.0.1", 143, allow_private=True)
    with pytest.raises(HostNotAllowed):
        check_host_allowed("127.0.0.1", 143, allow_private=False)


class Rebinding:
    """A resolver whose answer changes on every lookup: public first, then loopback."""

    def __init__(self) -> None:
        self.lookups = 0

    def __call__(self, host: str, port: int, **_: Any) -> list[Any]:
        self.lookups += 1
        address = "93.184.216.34" if self.lookups == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]


class RecordingProvider:
    def __init__(self) -> None:
        self.endpoints: list[ImapEndpoint] = []

    def open(self, endpoint: ImapEndpoint, credentials: Credentials, options: OpenOptions) -> Any:
        self.endpoints.append(endpoint)
        return None


def test_a_connection_goes_to_the_address_that_was_checked() -> None:
    rebinding = Rebinding()
    inner = RecordingProvider()
    provider = DestinationCheckedProvider(
        inner, ResolvingDestinationPolicy(allow_private=False, lookup=rebinding)
    )
    endpoint = ImapEndpoint("mail.example", 993, "tls", "someone")
    provider.open(endpoint, Credentials("password", "x"), OpenOptions("a1"))
    assert rebinding.lookups == 1
    assert inner.endpoints == [replace(endpoint, addresses=("93.184.216.34",))]
    # The next connection checks again, and the rebound answer is refused.
    with pytest.raises(HostNotAllowed):
        provider.open(endpoint, Credentials("password", "x"), OpenOptions("a1"))
    assert len(inner.endpoints) == 1


def test_with_private_hosts_allowed_nothing_is_resolved_or_pinned() -> None:
    rebinding = Rebinding()
    inner = RecordingProvider()
    provider = DestinationCheckedProvider(
        inner, ResolvingDestinationPolicy(allow_private=True, lookup=rebinding)
    )
    endpoint = ImapEndpoint("mail.example", 993, "tls", "someone")
    provider.open(endpoint, Credentials("password", "x"), OpenOptions("a1"))
    assert rebinding.lookups == 0 and inner.endpoints == [endpoint]


def test_a_token_request_names_the_checked_address_and_keeps_the_host_name() -> None:
    url = urlsplit("https://login.example:8443/oauth2/token?x=1")
    v4 = pinned(url, ipaddress.ip_address("93.184.216.34"))
    assert v4 == Pinned(
        "https://93.184.216.34:8443/oauth2/token?x=1", "login.example:8443", "login.example"
    )
    v6 = pinned(urlsplit("https://login.example/token"), ipaddress.ip_address("2001:db8::1"))
    assert (v6.url, v6.host_header, v6.server_name) == (
        "https://[2001:db8::1]/token",
        "login.example",
        "login.example",
    )
    assert pinned(url).url == "https://login.example:8443/oauth2/token?x=1"
