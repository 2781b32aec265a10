"""Resolution for the destination check: literals need no resolver; a resolver that
fails, answers nothing or hangs makes ``HostUnresolved``; every answer is checked."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any

import pytest

from application.mail.destinations import HostNotAllowed, HostUnresolved
from infrastructure.net_policy import check_host_allowed, resolve


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
