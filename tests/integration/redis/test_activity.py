"""The ``UserActivity`` port's two adapters, one contract: the Redis keys (the real
server) and the in-process stand-in. Recorded activity is answered for the users and
tenants asked about, expires after the window (in Redis by the keys' own TTL), is asked
for thousands of accounts in one round trip, cannot be spelt by another id, and a value
nobody of ours wrote is ignored."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from application.mail.activity import ActivityUnavailable, UserActivity
from infrastructure.in_process.activity import InProcessActivity
from infrastructure.redis.activity import RedisActivity
from infrastructure.redis.client import redis_client, replied
from tests.integration.redis.conftest import REDIS_URL

MakeActivity = Callable[[float], UserActivity]


class CountingRedis(redis.Redis):
    """A client that counts its round trips: single commands and pipeline executions."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.round_trips += 1
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        execute = pipe.execute

        def counted(raise_on_error: bool = True) -> Any:
            self.round_trips += 1
            return execute(raise_on_error)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe


@pytest.fixture
def counting_client(client: redis.Redis) -> Iterator[CountingRedis]:
    counting = CountingRedis(
        connection_pool=redis.ConnectionPool.from_url(REDIS_URL, decode_responses=True)
    )
    yield counting  # ``client`` (same server) removes the test's keys afterwards
    counting.close()


@pytest.fixture(params=["redis", "in_process"])
def make_activity(
    request: pytest.FixtureRequest, counting_client: CountingRedis, prefix: str
) -> MakeActivity:
    if request.param == "redis":
        return lambda window: RedisActivity(counting_client, window, prefix=prefix)
    return InProcessActivity


def test_recorded_activity_is_answered_for_whom_it_was_recorded(
    make_activity: MakeActivity,
) -> None:
    activity = make_activity(60.0)
    now = time.time()
    activity.record("t1", "u1", now - 5)
    activity.record("t1", "u2", now - 1)
    activity.record("t2", "u1", now - 2)
    found = activity.last_active(
        [("t1", "u1"), ("t1", "u2"), ("t2", "u1"), ("t2", "u9"), ("t3", "u1")],
        ["t1", "t2", "t3"],
        now,
    )
    assert found.users == {
        ("t1", "u1"): pytest.approx(now - 5),
        ("t1", "u2"): pytest.approx(now - 1),
        ("t2", "u1"): pytest.approx(now - 2),
    }
    assert found.tenants == {"t1": pytest.approx(now - 1), "t2": pytest.approx(now - 2)}
    assert found.of_account("t1", "u1", shared=False) == pytest.approx(now - 5)
    assert found.of_account("t2", None, shared=True) == pytest.approx(now - 2)
    assert found.of_account("t3", "u1", shared=False) is None
    assert activity.last_active([], [], now).users == {}


def test_no_id_spells_another_ids_key(make_activity: MakeActivity) -> None:
    activity = make_activity(60.0)
    now = time.time()
    activity.record("a:b", "c", now)
    found = activity.last_active([("a", "b:c"), ("a:b", "c")], ["a", "a:b"], now)
    assert set(found.users) == {("a:b", "c")}
    assert set(found.tenants) == {"a:b"}


def test_activity_expires_after_the_window(make_activity: MakeActivity) -> None:
    activity = make_activity(0.5)
    activity.record("t1", "u1", time.time())
    assert activity.last_active([("t1", "u1")], ["t1"], time.time()).users
    time.sleep(0.7)
    gone = activity.last_active([("t1", "u1")], ["t1"], time.time())
    assert gone.users == {} and gone.tenants == {}


def test_redis_keys_carry_the_window_as_ttl_and_vanish(
    counting_client: CountingRedis, prefix: str
) -> None:
    activity = RedisActivity(counting_client, 0.5, prefix=prefix)
    activity.record("t1", "u1", time.time())
    assert activity.flush()
    keys = [activity.user_key("t1", "u1"), activity.tenant_key("t1")]
    for key in keys:
        assert 0 < replied(counting_client.pttl(key)) <= 500
    time.sleep(0.7)
    assert counting_client.exists(*keys) == 0, "Redis forgot the inactive user by itself"


def test_thousands_of_accounts_are_asked_about_in_one_round_trip(
    make_activity: MakeActivity, counting_client: CountingRedis
) -> None:
    activity = make_activity(600.0)
    now = time.time()
    users = [(f"t{i % 50}", f"u{i}") for i in range(5000)]
    for tenant, user in users[::2]:  # every other user was active
        activity.record(tenant, user, now - 1)
    if isinstance(activity, RedisActivity):
        assert activity.flush()  # the records are sent; the read alone is counted
    before = counting_client.round_trips
    started = time.monotonic()
    found = activity.last_active(users, {t for t, _ in users}, now)
    elapsed = time.monotonic() - started
    assert set(found.users) == set(users[::2])
    assert set(found.tenants) == {f"t{i}" for i in range(0, 50, 2)}  # even i: even tenants
    assert counting_client.round_trips - before <= 1
    assert elapsed < 2.0, elapsed


def test_values_nobody_of_ours_wrote_are_ignored(
    counting_client: CountingRedis, prefix: str
) -> None:
    activity = RedisActivity(counting_client, 60.0, prefix=prefix)
    now = time.time()
    hostile = {
        ("t", "nan"): "nan",
        ("t", "inf"): "inf",
        ("t", "text"): "yesterday",
        ("t", "long"): "1" * 10_000,
        ("t", "old"): repr(now - 3600),
    }
    for (tenant, user), value in hostile.items():
        counting_client.set(activity.user_key(tenant, user), value, ex=60)
    counting_client.set(activity.tenant_key("t"), "-", ex=60)
    found = activity.last_active(list(hostile), ["t"], now)
    assert found.users == {} and found.tenants == {}


def test_redis_down_records_nothing_and_reading_says_unavailable(closed_port: int) -> None:
    down = RedisActivity(redis_client(f"redis://127.0.0.1:{closed_port}/0", timeout=0.5), 60.0)
    down.record("t1", "u1", time.time())  # best effort: no exception for the caller
    with pytest.raises(ActivityUnavailable):
        down.last_active([("t1", "u1")], [], time.time())


def test_the_shared_server_answers_what_another_client_recorded(prefix: str) -> None:
    """Two processes' clients: what one records, the other reads (the fleet's view)."""
    writer = RedisActivity.from_url(REDIS_URL, 60.0, prefix=prefix)
    reader = RedisActivity.from_url(REDIS_URL, 60.0, prefix=prefix)
    now = time.time()
    writer.record("t1", "u1", now)
    assert writer.flush()  # recording does not wait for Redis; a process sends it soon
    assert reader.last_active([("t1", "u1")], ["t1"], now).users == {
        ("t1", "u1"): pytest.approx(now)
    }
    redis_client(REDIS_URL).delete(writer.user_key("t1", "u1"), writer.tenant_key("t1"))


def test_restore_writes_back_what_is_missing_or_older_and_keeps_what_is_newer(
    make_activity: MakeActivity,
) -> None:
    activity = make_activity(60.0)
    now = time.time()
    activity.record("t1", "u2", now - 1)  # newer than what is restored for t1
    activity.restore({("t1", "u1"): now - 20, ("t1", "u2"): now - 30}, {"t1": now - 20}, now)
    found = activity.last_active([("t1", "u1"), ("t1", "u2")], ["t1"], now)
    assert found.users == {
        ("t1", "u1"): pytest.approx(now - 20),
        ("t1", "u2"): pytest.approx(now - 1),
    }
    assert found.tenants == {"t1": pytest.approx(now - 1)}


def test_restored_keys_live_for_what_is_left_of_their_window(
    counting_client: CountingRedis, prefix: str
) -> None:
    activity = RedisActivity(counting_client, 60.0, prefix=prefix)
    now = time.time()
    activity.restore({("t1", "u1"): now - 50, ("t1", "u2"): now - 61}, {}, now)
    assert 0 < replied(counting_client.pttl(activity.user_key("t1", "u1"))) <= 10_000
    assert counting_client.exists(activity.user_key("t1", "u2")) == 0, "its window had passed"
    counting_client.set(activity.user_key("t1", "u3"), "not a time")
    activity.restore({("t1", "u3"): now - 5}, {}, now)
    assert activity.last_active([("t1", "u3")], [], now).users == {
        ("t1", "u3"): pytest.approx(now - 5)
    }


def test_restore_of_thousands_is_one_round_trip(
    counting_client: CountingRedis, prefix: str
) -> None:
    activity = RedisActivity(counting_client, 600.0, prefix=prefix)
    now = time.time()
    users = {(f"t{i % 50}", f"u{i}"): now - 1 for i in range(5000)}
    before = counting_client.round_trips
    activity.restore(users, {f"t{i}": now - 1 for i in range(50)}, now)
    assert counting_client.round_trips - before == 1
    assert len(activity.last_active(users, [], now).users) == 5000


def test_recording_does_not_wait_for_redis_and_coalesces_a_users_records(
    make_activity: MakeActivity, closed_port: int
) -> None:
    down = RedisActivity(redis_client(f"redis://127.0.0.1:{closed_port}/0", timeout=0.5), 60.0)
    started = time.monotonic()
    for n in range(1000):
        down.record("t1", "u1", time.time() + n)
    assert time.monotonic() - started < 0.5  # a thousand records, no round trip waited for
    down.close()
    activity = make_activity(60.0)
    now = time.time()
    for n in range(100):  # a burst of pings: the latest time is what Redis keeps
        activity.record("t1", "u1", now - 100 + n)
    assert activity.last_active([("t1", "u1")], ["t1"], now).users == {
        ("t1", "u1"): pytest.approx(now - 1)
    }
