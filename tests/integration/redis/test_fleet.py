"""RedisFleet: heartbeats with a ttl, live workers found through their index set, with their
lease counts."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from application.leases import LeaseBackendUnavailable
from infrastructure.redis.client import replied
from infrastructure.redis.registry import RedisFleet


def fleet(client: redis.Redis, prefix: str, worker_id: str, ttl: float = 3.0) -> RedisFleet:
    return RedisFleet(client, worker_id, ttl, prefix=prefix + "worker:")


def test_heartbeats_list_the_live_workers_and_what_they_hold(
    client: redis.Redis, prefix: str
) -> None:
    w1, w2 = fleet(client, prefix, "w1"), fleet(client, prefix, "w2")
    assert w1.live_workers() == {}
    w1.heartbeat(held=3)
    w2.heartbeat(held=0)
    assert w1.live_workers() == {"w1": 3, "w2": 0}
    w1.heartbeat(held=5)
    assert w2.live_workers() == {"w1": 5, "w2": 0}
    assert w1.worker_id == "w1" and w1.interval == pytest.approx(1.0)


def test_a_worker_without_heartbeat_drops_out_after_the_ttl(
    client: redis.Redis, prefix: str
) -> None:
    dying = fleet(client, prefix, "dying", ttl=0.3)
    alive = fleet(client, prefix, "alive", ttl=0.3)
    dying.heartbeat(held=7)
    alive.heartbeat(held=1)
    time.sleep(0.2)
    alive.heartbeat(held=1)  # refreshed within the ttl
    time.sleep(0.2)
    assert alive.live_workers() == {"alive": 1}


def test_leave_removes_the_worker_at_once(client: redis.Redis, prefix: str) -> None:
    w1, w2 = fleet(client, prefix, "w1"), fleet(client, prefix, "w2")
    w1.heartbeat(held=1)
    w2.heartbeat(held=1)
    w1.leave()
    assert w2.live_workers() == {"w2": 1}


def test_only_heartbeats_under_this_prefix_are_listed(client: redis.Redis, prefix: str) -> None:
    odd = RedisFleet(client, "w1", 3.0, prefix=prefix + "w[*]?:")
    plain = RedisFleet(client, "w1", 3.0, prefix=prefix + "wx*?:")
    odd.heartbeat(held=1)
    plain.heartbeat(held=2)
    client.set(prefix + "w[*]?:garbage", "x")  # a string, not a heartbeat hash
    client.hset(prefix + "w[*]?:odd", "held", "many")
    assert odd.live_workers() == {"w1": 1}
    assert plain.live_workers() == {"w1": 2}


def test_an_unreachable_redis_raises_quickly(closed_port: int) -> None:
    down = RedisFleet.from_url(f"redis://127.0.0.1:{closed_port}/0", "w1", 3.0)
    started = time.monotonic()
    with pytest.raises(LeaseBackendUnavailable):
        down.heartbeat(held=0)
    with pytest.raises(LeaseBackendUnavailable):
        down.live_workers()
    assert time.monotonic() - started < 3.0


def test_worker_id_and_ttl_are_checked(client: redis.Redis) -> None:
    with pytest.raises(ValueError):
        RedisFleet(client, "", 3.0)
    with pytest.raises(ValueError):
        RedisFleet(client, "w1", 0)


def test_live_workers_do_not_depend_on_the_size_of_the_keyspace(
    client: redis.Redis, prefix: str
) -> None:
    """The workers are found through their index, not by walking every key: thousands of
    other keys (leases, activity) cost nothing, and a stray hash under the prefix whose id
    never heartbeat is not a worker."""
    w1 = fleet(client, prefix, "w1")
    w1.heartbeat(held=2)
    pipe = client.pipeline(transaction=False)
    for i in range(5000):
        pipe.set(f"{prefix}lease:{i}", "token", px=60_000)
    pipe.hset(prefix + "worker:stray", "held", "9")
    pipe.execute()
    recording = Recording(connection_pool=client.connection_pool)
    reader = RedisFleet(recording, "w2", 3.0, prefix=prefix + "worker:")
    assert reader.live_workers() == {"w1": 2}
    assert reader.live_workers() == {"w1": 2}
    # One script call per look (EVAL the first time, when the script is not cached yet).
    assert recording.sent[-1] == "EVALSHA" and len(recording.sent) <= 4, recording.sent


class Recording(redis.Redis):
    """A client that notes the name of every command it sends."""

    sent: list[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.__dict__.setdefault("sent", []).append(str(args[0]).upper())
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


def test_a_lapsed_worker_leaves_the_index(client: redis.Redis, prefix: str) -> None:
    gone = fleet(client, prefix, "gone", ttl=0.2)
    alive = fleet(client, prefix, "alive")
    gone.heartbeat(held=1)
    alive.heartbeat(held=1)
    index = prefix + "worker-index"
    assert {m.decode() if isinstance(m, bytes) else m for m in replied(client.smembers(index))} == {
        "gone",
        "alive",
    }
    time.sleep(0.3)
    assert alive.live_workers() == {"alive": 1}
    assert {m.decode() if isinstance(m, bytes) else m for m in replied(client.smembers(index))} == {
        "alive"
    }
    gone.heartbeat(held=3)  # back: its heartbeat adds it again
    assert alive.live_workers() == {"alive": 1, "gone": 3}
    alive.leave()
    assert gone.live_workers() == {"gone": 3}


def test_the_fleet_view_reads_each_workers_accounts_and_login_rate(
    client: redis.Redis, prefix: str
) -> None:
    from infrastructure.redis.registry import RedisWorkers  # noqa: PLC0415

    view = RedisWorkers(client, prefix=prefix + "worker:")
    assert view.workers() == []
    w1, w2 = fleet(client, prefix, "w1", ttl=0.4), fleet(client, prefix, "w2")
    before = time.time()
    w1.heartbeat(held=3, login_rate=12.5)
    w2.heartbeat(held=0)
    seen = view.workers()
    assert [(w.worker_id, w.held, w.login_rate) for w in seen] == [("w1", 3, 12.5), ("w2", 0, None)]
    assert all(before - 1 <= w.seen_at <= time.time() + 1 for w in seen)
    w1.heartbeat(held=4)  # the rate is not measured any more: no stale figure stays
    assert view.workers()[0].login_rate is None
    # A stray value under the prefix is not a heartbeat; a lapsed worker drops out.
    client.hset(prefix + "worker:w3", mapping={"held": "many", "at": "x"})
    client.sadd(prefix + "worker-index", "w3")
    time.sleep(0.5)
    assert [w.worker_id for w in view.workers()] == ["w2"]


def test_the_fleet_view_reports_an_unreachable_registry(closed_port: int) -> None:
    from infrastructure.redis.registry import RedisWorkers  # noqa: PLC0415

    view = RedisWorkers.from_url(f"redis://127.0.0.1:{closed_port}/0", timeout=0.5)
    with pytest.raises(LeaseBackendUnavailable):
        view.workers()
    view.close()
