"""AccountDirectory: what a signal taught (from the event store) wins over the lagging read
model until the read model agrees, or for a grace period at most."""

from __future__ import annotations

from typing import Any

from workers.account_info import AccountInfo
from workers.directory import AccountDirectory

GRACE = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def info(account_id: str) -> AccountInfo:
    return AccountInfo(account_id, "t1", None, "shared", "imap.example")


def directory(clock: Clock) -> AccountDirectory:
    unread: Any = object()  # apply / learn / forget never read the stores
    return AccountDirectory(unread, unread, grace=GRACE, clock=clock)


def test_a_reconnected_account_survives_a_lagging_refresh() -> None:
    clock = Clock()
    d = directory(clock)
    d.apply({})
    d.learn("a", info("a"))  # signal: reconnected (event store says active)
    d.apply({})  # the read model still says disconnected
    assert "a" in d.syncable
    d.apply({"a": info("a")})  # caught up: the read model is in charge again
    clock.now = 10.0
    d.apply({})  # disconnected later, its signal lost: the read model is believed
    assert "a" not in d.syncable


def test_a_disconnected_account_stays_out_until_the_read_model_agrees() -> None:
    clock = Clock()
    d = directory(clock)
    d.apply({"a": info("a"), "b": info("b")})
    d.forget("a")  # signal: disconnected
    assert set(d.syncable) == {"b"}
    d.apply({"a": info("a"), "b": info("b")})  # lagging
    assert set(d.syncable) == {"b"}
    d.apply({"b": info("b")})
    d.apply({"a": info("a"), "b": info("b")})  # reconnected later (signal lost)
    assert set(d.syncable) == {"a", "b"}


def test_what_was_learnt_expires_after_the_grace_period() -> None:
    clock = Clock()
    d = directory(clock)
    d.learn("a", info("a"))
    clock.now = GRACE - 1
    d.apply({})
    assert "a" in d.syncable
    clock.now = GRACE + 1
    d.apply({})  # the read model never showed it: believe the read model now
    assert "a" not in d.syncable


def test_of_user_lists_own_and_shared_accounts() -> None:
    d = directory(Clock())
    d.apply(
        {
            "own": AccountInfo("own", "t1", "ann", "user", "h"),
            "bobs": AccountInfo("bobs", "t1", "bob", "user", "h"),
            "shared": AccountInfo("shared", "t1", None, "shared", "h"),
            "other": AccountInfo("other", "t2", None, "shared", "h"),
        }
    )
    assert sorted(d.of_user("t1", "ann")) == ["own", "shared"]


def test_of_user_finds_the_users_own_and_the_tenants_shared_accounts_after_every_change() -> None:
    d = directory(Clock())
    own = AccountInfo("own", "t1", "u1", "user", "imap.example")
    others = AccountInfo("others", "t1", "u2", "user", "imap.example")
    shared = AccountInfo("shared", "t1", None, "shared", "imap.example")
    elsewhere = AccountInfo("elsewhere", "t2", "u1", "user", "imap.example")
    d.apply({a.account_id: a for a in (own, others, shared, elsewhere)})
    assert sorted(d.of_user("t1", "u1")) == ["own", "shared"]
    assert d.of_user("t2", "u1") == ["elsewhere"]
    assert d.of_user("t3", "u1") == []
    d.learn("new", AccountInfo("new", "t1", "u1", "user", "imap.example"))
    assert sorted(d.of_user("t1", "u1")) == ["new", "own", "shared"]
    d.forget("own")
    assert sorted(d.of_user("t1", "u1")) == ["new", "shared"]
    d.apply({"others": others})  # "new" stays: learnt, the read model lags
    assert sorted(d.of_user("t1", "u1")) == ["new"]
    assert d.of_user("t1", "u2") == ["others"]
