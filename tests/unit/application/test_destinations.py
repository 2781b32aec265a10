"""The destination rule over resolved addresses: internal ones are refused."""

from __future__ import annotations

import ipaddress

import pytest

from application.destinations import HostNotAllowed, check_addresses, is_internal

INTERNAL = [
    "127.0.0.1",
    "10.0.0.1",
    "172.31.255.255",
    "192.168.0.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "224.0.0.251",
    "255.255.255.255",
    "::1",
    "::",
    "fc00::1",
    "fdff::1",
    "fe80::1",
    "ff02::1",
    "::ffff:10.0.0.1",
    "2002:7f00:1::1",  # 6to4 around 127.0.0.1
]
PUBLIC = ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"]


@pytest.mark.parametrize("address", INTERNAL)
def test_internal_addresses(address: str) -> None:
    assert is_internal(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses(address: str) -> None:
    assert not is_internal(ipaddress.ip_address(address))


def test_one_internal_address_among_public_ones_refuses_the_host() -> None:
    public = [ipaddress.ip_address(a) for a in PUBLIC]
    check_addresses("mail.example", public)
    with pytest.raises(HostNotAllowed, match="TIDINGS_ALLOW_PRIVATE_HOSTS"):
        check_addresses("mail.example", [*public, ipaddress.ip_address("10.1.1.1")])
