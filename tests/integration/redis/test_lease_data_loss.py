"""A Redis that comes back without its data has forgotten every lease while the holders
still act on theirs: no lease is granted for one ttl after such a loss, so a holder's
failing renewal ends its watch before anyone else can start one. A private redis-server
is killed and started again, empty, on the same port."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from application.leases import LeaseBackendUnavailable
from infrastructure.redis.client import redis_client
from infrastructure.redis.lease import RedisLease
from tests.e2e.workers.servers import RedisServer, wait_for

TTL = 1.5


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    private = RedisServer(tmp_path).start()
    yield private
    private.stop()


def lease(server: RedisServer, holder: str) -> RedisLease:
    return RedisLease(redis_client(server.url), TTL, holder=holder)


def test_no_lease_is_granted_for_a_ttl_after_redis_lost_its_data(server: RedisServer) -> None:
    holder, other = lease(server, "w1"), lease(server, "w2")
    token = holder.acquire("acct")
    assert token is not None
    assert other.acquire("acct") is None  # held: and now `other` knows the store's epoch

    server.kill()
    server.start()  # same port, empty
    lost_at = time.monotonic()
    assert other.acquire("acct") is None, "granted while its holder may still act on it"
    newcomer = lease(server, "w3")
    assert newcomer.acquire("acct") is None, "the quiet ttl holds for every client"
    assert other.acquire_many(["acct", "free"]) == {"acct": None, "free": None}
    assert holder.renew("acct", token) is False, "the holder learns it is gone"

    took = wait_for("the lease to be granted again", lambda: other.acquire("acct"), TTL * 4)
    assert time.monotonic() - lost_at >= TTL
    assert took <= TTL + 1.0
    for client in (holder, other, newcomer):
        client.close()


def test_a_first_start_grants_at_once(server: RedisServer) -> None:
    first = lease(server, "w1")
    assert first.acquire("acct") is not None
    assert lease(server, "w2").acquire("other") is not None
    assert None not in lease(server, "w3").acquire_many(["a", "b"]).values()
    first.close()


def test_a_lease_released_and_taken_again_needs_no_quiet(server: RedisServer) -> None:
    one = lease(server, "w1")
    token = one.acquire("acct")
    assert token is not None and one.release("acct", token)
    assert one.acquire("acct") is not None
    one.close()


def test_after_an_outage_longer_than_a_ttl_leases_are_granted_at_once(
    server: RedisServer,
) -> None:
    """Every holder has stood down by then: waiting longer would only delay the claims.
    A client knows the outage from its own calls failing (a worker renews every ttl/3)."""
    holder, other = lease(server, "w1"), lease(server, "w2")
    assert holder.acquire("acct") is not None
    assert other.acquire("other") is not None
    server.kill()
    with pytest.raises(LeaseBackendUnavailable):
        other.acquire("acct")
    time.sleep(TTL)
    server.start()
    assert other.acquire("acct") is not None


def test_after_a_short_outage_the_quiet_counts_from_its_start(server: RedisServer) -> None:
    holder, other = lease(server, "w1"), lease(server, "w2")
    assert holder.acquire("acct") is not None
    assert other.acquire("other") is not None
    server.kill()
    with pytest.raises(LeaseBackendUnavailable):
        other.acquire("acct")
    failed_at = time.monotonic()
    time.sleep(TTL / 2)
    server.start()
    assert other.acquire("acct") is None
    took = wait_for("the lease to be granted again", lambda: other.acquire("acct"), TTL * 4)
    assert TTL - 0.1 <= time.monotonic() - failed_at <= TTL + 0.5
    assert took <= TTL / 2 + 0.5
    for client in (holder, other):
        client.close()
