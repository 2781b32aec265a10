"""Per-host connection caps by provider: the host's provider cap, ``per_host`` for a host
no provider matches, host names compared as the table compares them."""

from __future__ import annotations

from application.mail.providers import ProviderLimits, ProviderTable
from workers.caps import ConnectionCaps


def test_each_host_gets_its_provider_cap() -> None:
    caps = ConnectionCaps(per_account=100, per_host=3)
    assert caps.host_cap("imap.gmail.com") == 15
    assert caps.host_cap("outlook.office365.com") == 15
    assert caps.host_cap("imap.mail.yahoo.com") == 10
    assert caps.host_cap("imap.example.com") == 3
    taken = sum(caps.take(f"a{i}", "imap.mail.yahoo.com") for i in range(30))
    assert taken == 10
    assert sum(caps.take(f"b{i}", "imap.example.com") for i in range(30)) == 3
    caps.give("a0", "imap.mail.yahoo.com")
    assert caps.take("c", "imap.mail.yahoo.com")
    assert not caps.take("d", "imap.mail.yahoo.com")


def test_an_operator_entry_sets_the_cap_and_the_account_cap_still_holds() -> None:
    table = ProviderTable([ProviderLimits("mine", ("127.0.0.1",), conn_cap=5)])
    caps = ConnectionCaps(per_account=2, per_host=50, providers=table)
    assert [caps.take("a", "127.0.0.1") for _ in range(3)] == [True, True, False]
    assert sum(caps.take(f"b{i}", "127.0.0.1") for i in range(10)) == 3
