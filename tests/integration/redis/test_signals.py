"""RedisSignals: publish/subscribe round trip, and a subscriber that survives losing Redis."""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from application.signals import Signal
from infrastructure.redis.client import replied
from infrastructure.redis.signals import RedisSignals
from tests.integration.redis.proxy import TcpProxy

FAST = {"reconnect_base": 0.05, "reconnect_cap": 0.5, "ping_interval": 1.0}


@pytest.fixture
def channel() -> str:
    return f"tidings-test:signals:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_signals(channel: str) -> Iterator[Callable[..., RedisSignals]]:
    made: list[RedisSignals] = []

    def make(url: str, **options: Any) -> RedisSignals:
        signals = RedisSignals.from_url(url, channel=channel, **{**FAST, **options})
        made.append(signals)
        return signals

    yield make
    for signals in made:
        signals.close()


def listen(signals: RedisSignals) -> queue.Queue[Signal]:
    received: queue.Queue[Signal] = queue.Queue()
    signals.subscribe(received.put)
    assert signals.wait_listening(3.0)
    return received


def eventually_received(
    publisher: RedisSignals, received: queue.Queue[Signal], signal: Signal, within: float = 5.0
) -> None:
    """Publish until it arrives: a signal sent while the subscriber is away is lost."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        publisher.publish(signal)
        try:
            if received.get(timeout=0.2) == signal:
                return
        except queue.Empty:
            continue
    pytest.fail(f"{signal} never arrived")


def test_round_trip_under_a_second(
    make_signals: Callable[..., RedisSignals], redis_url: str
) -> None:
    subscriber = make_signals(redis_url)
    publisher = make_signals(redis_url)
    received = listen(subscriber)
    signals = [
        Signal("account_changed", "t1", account_id="a1"),
        Signal("user_active", "t1", user_id="u1"),
        Signal("sync_now", "t2", account_id="a2"),
    ]
    started = time.monotonic()
    for signal in signals:
        publisher.publish(signal)
    assert [received.get(timeout=1.0) for _ in signals] == signals
    assert time.monotonic() - started < 1.0


def test_bad_messages_and_failing_callbacks_do_not_stop_the_subscriber(
    make_signals: Callable[..., RedisSignals],
    redis_url: str,
    client: redis.Redis,
    channel: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    subscriber = make_signals(redis_url)

    def explode(signal: Signal) -> None:
        raise RuntimeError("bug in a callback")

    subscriber.subscribe(explode)
    received = listen(subscriber)
    client.publish(channel, "not json")
    client.publish(channel, '{"kind": "self_destruct", "tenant_id": "t"}')
    signal = Signal("sync_now", "t1", account_id="a1")
    subscriber.publish(signal)
    assert received.get(timeout=1.0) == signal
    messages = [record.getMessage() for record in caplog.records]
    assert sum("signals.invalid" in m for m in messages) == 2
    assert any("signals.callback_failed" in m for m in messages)


def test_subscriber_survives_its_connection_being_killed(
    make_signals: Callable[..., RedisSignals],
    redis_url: str,
    client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = f"tidings-test-{uuid.uuid4().hex[:8]}"
    subscriber = make_signals(redis_url, client_name=name)
    publisher = make_signals(redis_url)
    received = listen(subscriber)
    # Like CLIENT KILL TYPE pubsub, but only our subscriber's connection: the server is
    # shared with other test runs.
    ours = [c for c in replied(client.client_list(_type="pubsub")) if c.get("name") == name]
    assert len(ours) == 1
    with caplog.at_level(logging.WARNING, logger="tidings.signals"):
        client.client_kill_filter(_id=ours[0]["id"])
        eventually_received(publisher, received, Signal("sync_now", "t1", account_id="a1"))
    assert any("signals.subscriber_lost" in r.getMessage() for r in caplog.records)
    again = [c for c in replied(client.client_list(_type="pubsub")) if c.get("name") == name]
    assert len(again) == 1 and again[0]["id"] != ours[0]["id"]


def test_subscriber_reconnects_when_redis_goes_away_and_comes_back(
    make_signals: Callable[..., RedisSignals],
    redis_url: str,
    proxy: TcpProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    subscriber = make_signals(proxy.url)
    publisher = make_signals(redis_url)
    received = listen(subscriber)
    with caplog.at_level(logging.WARNING, logger="tidings.signals"):
        proxy.stop()
        time.sleep(0.5)  # several refused reconnects, backing off
        lost = [r.getMessage() for r in caplog.records if "subscriber_lost" in r.getMessage()]
        assert len(lost) >= 2
        assert "error=ConnectionError" in lost[0] and "retry_in=" in lost[0]
        proxy.start()
        eventually_received(publisher, received, Signal("user_active", "t1", user_id="u1"))


def test_a_silently_dead_connection_is_noticed_by_its_pings(
    make_signals: Callable[..., RedisSignals],
    redis_url: str,
    proxy: TcpProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    subscriber = make_signals(proxy.url, ping_interval=0.3)
    publisher = make_signals(redis_url)
    received = listen(subscriber)
    with caplog.at_level(logging.WARNING, logger="tidings.signals"):
        proxy.frozen = True  # no FIN, no RST: just silence
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and not any(
            "subscriber_lost" in r.getMessage() for r in caplog.records
        ):
            time.sleep(0.05)
        assert any("subscriber_lost" in r.getMessage() for r in caplog.records)
        proxy.frozen = False
        eventually_received(publisher, received, Signal("sync_now", "t1", account_id="a1"))


def test_publish_without_redis_is_dropped_quickly(
    make_signals: Callable[..., RedisSignals], closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    signals = make_signals(f"redis://127.0.0.1:{closed_port}/0")
    started = time.monotonic()
    signals.publish(Signal("sync_now", "t1", account_id="a1"))
    assert time.monotonic() - started < 0.1  # the writer does not wait for Redis
    assert signals.flush(3.0)
    assert any("signals.publish_failed" in r.getMessage() for r in caplog.records)


def test_close_stops_the_subscriber_thread(
    make_signals: Callable[..., RedisSignals], redis_url: str
) -> None:
    subscriber = make_signals(redis_url)
    listen(subscriber)

    def running() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "tidings-signals"]

    assert running()
    started = time.monotonic()
    subscriber.close()
    assert not running()
    assert time.monotonic() - started < 2.0
    with pytest.raises(RuntimeError):
        subscriber.subscribe(lambda signal: None)
