"""The Lease contract, run against real Redis and against the in-process stand-in.

A backend-agnostic suite (``LeaseContract``), subclassed once per backend; the Redis
subclass adds what only Redis has: lost scripts, an unreachable server, big batches.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from application.leases import LeaseBackend as Lease
from application.leases import LeaseBackendUnavailable, WorkerRegistry
from application.signals import SignalBus
from infrastructure.in_process.lease import InProcessLease
from infrastructure.redis.client import redis_client, replied
from infrastructure.redis.lease import BATCH, RedisLease
from infrastructure.redis.registry import RedisFleet
from infrastructure.redis.signals import RedisSignals
from tests.integration.redis.proxy import TcpProxy

TTL = 0.4  # seconds: short, so expiry tests stay fast; sleeps leave >= 150 ms of margin


def _adapters_implement_their_ports(
    redis_lease: RedisLease,
    local: InProcessLease,
    fleet: RedisFleet,
    signals: RedisSignals,
) -> tuple[Lease, Lease, WorkerRegistry, SignalBus]:
    return redis_lease, local, fleet, signals  # checked by mypy, never called


class LeaseContract:
    """Subclasses provide ``lease`` (and ``other``: a second holder on the same store) and
    ``advance`` (let time pass)."""

    OTHER = "w1"  # the holder name of ``other``; ``lease`` is "w1"

    @pytest.fixture
    def other(self, lease: Lease) -> Lease:
        return lease

    def advance(self, seconds: float) -> None:
        raise NotImplementedError

    def test_acquire_returns_a_token_and_a_second_acquire_fails(
        self, lease: Lease, other: Lease
    ) -> None:
        token = lease.acquire("acct-1")
        assert token
        assert other.acquire("acct-1") is None
        assert lease.acquire("acct-1") is None  # not re-entrant either
        assert other.acquire("acct-2") not in (None, token)
        assert lease.ttl_seconds == TTL

    def test_acquire_many_takes_the_free_keys_each_with_a_token(
        self, lease: Lease, other: Lease
    ) -> None:
        assert other.acquire("b") is not None
        answers = lease.acquire_many(["a", "b", "c", "a"])
        assert set(answers) == {"a", "b", "c"}
        assert answers["b"] is None
        token_a, token_c = answers["a"], answers["c"]
        assert token_a is not None and token_c is not None and token_a != token_c
        assert other.acquire("a") is None and other.acquire("c") is None
        assert lease.holders(["a", "c"]) == {"a": "w1", "c": "w1"}
        assert lease.renew("a", token_a) and lease.release("c", token_c)
        assert lease.acquire_many([]) == {}

    def test_release_needs_the_holders_token(self, lease: Lease, other: Lease) -> None:
        token = lease.acquire("acct-1")
        assert token is not None
        assert other.release("acct-1", "not-the-token") is False
        assert other.acquire("acct-1") is None
        assert lease.release("acct-1", token) is True
        assert lease.release("acct-1", token) is False  # already gone
        assert other.acquire("acct-1") is not None

    def test_a_lease_expires_after_its_ttl(self, lease: Lease, other: Lease) -> None:
        old = lease.acquire("acct-1")
        assert old is not None
        self.advance(TTL + 0.15)
        new = other.acquire("acct-1")
        assert new is not None and new != old
        # The expired holder can neither renew nor release the new holder's lease.
        assert lease.renew("acct-1", old) is False
        assert lease.release("acct-1", old) is False
        assert other.acquire("acct-1") is None

    def test_renew_extends_the_lease(self, lease: Lease, other: Lease) -> None:
        token = lease.acquire("acct-1")
        assert token is not None
        self.advance(0.25)
        assert lease.renew("acct-1", token) is True
        self.advance(0.25)  # past the first ttl, within the renewed one
        assert other.acquire("acct-1") is None
        assert lease.renew("acct-1", token) is True
        self.advance(TTL + 0.15)
        assert lease.renew("acct-1", token) is False

    def test_renew_with_the_wrong_token_fails_and_does_not_extend(
        self, lease: Lease, other: Lease
    ) -> None:
        token = lease.acquire("acct-1")
        assert token is not None
        self.advance(0.25)
        assert other.renew("acct-1", "not-the-token") is False
        assert other.renew("never-held", "whatever") is False
        self.advance(0.3)
        assert other.acquire("acct-1") is not None

    def test_renew_many_answers_each_key(self, lease: Lease, other: Lease) -> None:
        mine = lease.acquire("mine")
        theirs = other.acquire("theirs")
        released = lease.acquire("released")
        assert mine and theirs and released
        assert lease.release("released", released)
        answers = lease.renew_many(
            {"mine": mine, "theirs": "stale-token", "released": released, "never": "x"}
        )
        assert answers == {"mine": True, "theirs": False, "released": False, "never": False}
        assert lease.renew_many({}) == {}

    def test_release_many_answers_each_key(self, lease: Lease, other: Lease) -> None:
        a = lease.acquire("a")
        b = other.acquire("b")
        assert a and b
        assert lease.release_many({"a": a, "b": "stale"}) == {"a": True, "b": False}
        assert set(lease.held(["a", "b", "c"])) == {"b"}

    def test_held_lists_keys_anyone_holds(self, lease: Lease, other: Lease) -> None:
        assert lease.acquire("x") and other.acquire("y")
        held = lease.held(["x", "y", "z", "x"])
        assert set(held) == {"x", "y"}
        assert all(0 < left <= lease.ttl_seconds for left in held.values())
        assert lease.held([]) == {}

    def test_held_by_tells_how_long_and_who_in_one_read(self, lease: Lease, other: Lease) -> None:
        assert other.acquire("x") is not None
        found = lease.held_by(["x", "free", "x"])
        assert set(found) == {"x"}
        left, holder = found["x"]
        assert 0 < left <= lease.ttl_seconds and holder == self.OTHER
        assert lease.held_by([]) == {}

    def test_holders_name_who_holds_each_key(self, lease: Lease, other: Lease) -> None:
        assert lease.acquire("x") and other.acquire("y")
        mine = lease.acquire("gone")
        assert mine and lease.release("gone", mine)
        assert lease.holders(["x", "y", "z", "gone", "x"]) == {"x": "w1", "y": self.OTHER}
        assert lease.holders([]) == {}
        self.advance(TTL + 0.15)
        assert lease.holders(["x", "y"]) == {}  # lapsed: nobody holds them

    def test_held_tells_how_long_until_a_lease_lapses(self, lease: Lease) -> None:
        token = lease.acquire("k")
        assert token
        self.advance(0.2)
        assert TTL - 0.35 < lease.held(["k"])["k"] <= TTL - 0.15
        assert lease.renew("k", token)
        assert TTL - 0.1 < lease.held(["k"])["k"] <= TTL

    def test_concurrent_acquires_have_one_winner(self, lease: Lease, other: Lease) -> None:
        tokens: list[str | None] = []
        start = threading.Barrier(16)

        def race(holder: Lease) -> None:
            start.wait()
            tokens.append(holder.acquire("contended"))

        threads = [
            threading.Thread(target=race, args=(lease if i % 2 else other,)) for i in range(16)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len([t for t in tokens if t is not None]) == 1


class TestInProcessLease(LeaseContract):
    now = 0.0

    @pytest.fixture
    def lease(self) -> InProcessLease:
        self.now = 1000.0
        return InProcessLease(TTL, clock=lambda: self.now, holder="w1")

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TestRedisLease(LeaseContract):
    OTHER = "worker:2"  # a holder name may hold ":"

    @pytest.fixture
    def lease(self, client: redis.Redis, prefix: str) -> RedisLease:
        return RedisLease(client, TTL, prefix=prefix + "lease:", holder="w1")

    @pytest.fixture
    def other(self, redis_url: str, prefix: str) -> Iterator[RedisLease]:
        other = RedisLease.from_url(redis_url, TTL, prefix=prefix + "lease:", holder=self.OTHER)
        yield other
        other.close()

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)

    def test_keys_carry_the_prefix_and_a_millisecond_ttl(
        self, lease: RedisLease, client: redis.Redis, prefix: str
    ) -> None:
        token = lease.acquire("acct-1")
        assert client.get(prefix + "lease:acct-1") == token
        assert 0 < replied(client.pttl(prefix + "lease:acct-1")) <= TTL * 1000

    def test_scripts_are_reloaded_after_a_script_flush(
        self, lease: RedisLease, client: redis.Redis
    ) -> None:
        token = lease.acquire("acct-1")
        assert token is not None
        assert lease.renew("acct-1", token) is True  # scripts loaded and cached by sha
        client.script_flush()  # as after a Redis restart
        assert lease.renew("acct-1", token) is True
        client.script_flush()
        assert lease.renew_many({"acct-1": token, "other": "x"}) == {"acct-1": True, "other": False}
        client.script_flush()
        assert set(lease.held(["acct-1", "free"])) == {"acct-1"}
        client.script_flush()
        assert lease.release("acct-1", token) is True

    def test_a_key_without_expiry_counts_as_held_for_a_full_ttl(
        self, lease: RedisLease, client: redis.Redis, prefix: str
    ) -> None:
        client.set(prefix + "lease:stray", "not a lease")  # written by hand: no expiry
        assert lease.held(["stray", "free"]) == {"stray": TTL}
        assert lease.held_by(["stray", "free"]) == {"stray": (TTL, "")}

    def test_held_by_names_each_holder_as_holders_does(
        self, client: redis.Redis, prefix: str
    ) -> None:
        names = ["w1", "host:w2", "", "w,3"]  # a colon, none, a comma: names are data
        for i, name in enumerate(names):
            RedisLease(client, 30.0, prefix=prefix + "lease:", holder=name).acquire(f"k{i}")
        lease = RedisLease(client, 30.0, prefix=prefix + "lease:")
        keys = [f"k{i}" for i in range(len(names))] + ["free"]
        found = lease.held_by(keys)
        assert {key: holder for key, (_, holder) in found.items()} == lease.holders(keys)
        assert [found[f"k{i}"][1] for i in range(len(names))] == names

    def test_batches_larger_than_one_round_trip(self, client: redis.Redis, prefix: str) -> None:
        lease = RedisLease(client, 30.0, prefix=prefix + "lease:")  # acquiring takes a while
        count = BATCH * 2 + 7
        tokens = {f"acct-{i}": lease.acquire(f"acct-{i}") for i in range(count)}
        held = {key: token for key, token in tokens.items() if token is not None}
        assert len(held) == count
        many = lease.acquire_many([f"many-{i}" for i in range(count)] + ["acct-1"])
        assert many["acct-1"] is None
        assert sum(token is not None for token in many.values()) == count
        items = {**held, "acct-0": "stale"}
        answers = lease.renew_many(items)
        assert answers == {key: key != "acct-0" for key in items}
        assert len(lease.held(items)) == count
        assert len(lease.held_by(items)) == count
        assert sum(lease.release_many(held).values()) == count

    def test_an_unreachable_redis_raises_quickly(self, closed_port: int) -> None:
        lease = RedisLease.from_url(f"redis://127.0.0.1:{closed_port}/0", TTL)
        for call in (
            lambda: lease.acquire("a"),
            lambda: lease.renew("a", "t"),
            lambda: lease.release("a", "t"),
            lambda: lease.renew_many({"a": "t"}),
            lambda: lease.held(["a"]),
        ):
            started = time.monotonic()
            with pytest.raises(LeaseBackendUnavailable):
                call()
            assert time.monotonic() - started < 3.0

    def test_a_silent_redis_times_out(self) -> None:
        # A listener that accepts and never answers: the read timeout bounds the wait.
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            port = silent.getsockname()[1]
            lease = RedisLease(
                redis_client(f"redis://127.0.0.1:{port}/0", timeout=0.3, retries=0), TTL
            )
            started = time.monotonic()
            with pytest.raises(LeaseBackendUnavailable):
                lease.acquire("a")
            assert time.monotonic() - started < 2.0

    def test_leases_work_again_when_redis_comes_back(self, proxy: TcpProxy, prefix: str) -> None:
        lease = RedisLease.from_url(proxy.url, 2.0, prefix=prefix + "lease:")
        token = lease.acquire("acct-1")
        assert token is not None
        proxy.stop()
        with pytest.raises(LeaseBackendUnavailable):
            lease.renew("acct-1", token)
        proxy.start()
        # The pooled connection died with the proxy; the client reconnects by itself.
        assert lease.renew("acct-1", token) is True
        assert lease.release("acct-1", token) is True
        lease.close()
