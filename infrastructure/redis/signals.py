"""Redis adapter of the ``SignalBus`` port: JSON on the pub/sub channel ``tidings:signals``.

Publishing is best effort (the poll is the correctness anchor: docs/workers.md): the write
that publishes does not wait for Redis; a write-behind thread (``write_behind.py``)
sends the signals in order, pipelined, and a Redis error is logged and those signals
dropped, never raised into the write. ``close`` sends what is pending first.

The subscriber is one daemon thread per ``RedisSignals`` that calls every subscribed
callback, in order, for each signal. Its states:

    connecting --SUBSCRIBE confirmed--> listening --error / silence--> waiting --delay--> connecting
                                                 --close()--> closed  (from any state)

- ``listening``: it PINGs every ``ping_interval`` and treats ``2 * ping_interval`` without
  a word from Redis as a dead connection, so a silently dropped socket is noticed.
- ``waiting``: the delay starts at ``reconnect_base`` and doubles to ``reconnect_cap``; it
  resets only after a subscription has lived ``healthy_after`` seconds, so a flapping
  Redis does not get a reconnect storm. Every loss is logged at warning.
- Signals published while the subscriber is not listening are lost (pub/sub keeps
  nothing); the poll picks up the work later.
- A message that is not a valid signal is logged and skipped; a callback that raises is
  logged and the next callback still runs. Callbacks run on the subscriber thread: keep
  them short (hand the signal to a queue).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Protocol, get_args

import redis
from redis.exceptions import RedisError

from application.signals import Signal, SignalKind
from infrastructure.redis.client import redis_client
from infrastructure.redis.write_behind import Command, WriteBehind

log = logging.getLogger("tidings.signals")

CHANNEL = "tidings:signals"
PING_PAYLOAD = "tidings-signals-ping"
KINDS: dict[str, SignalKind] = {kind: kind for kind in get_args(SignalKind)}


def _publish_failed(error: RedisError, batch: list[Command]) -> None:
    kinds = sorted({str(json.loads(c.args[1]).get("kind")) for c in batch})
    log.warning(
        "signals.publish_failed count=%d kinds=%s error=%s",
        len(batch),
        ",".join(kinds),
        type(error).__name__,
    )


class InvalidSignal(ValueError):
    pass


def encode(signal: Signal) -> str:
    return json.dumps(asdict(signal), separators=(",", ":"))


def decode(data: str | bytes) -> Signal:
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise InvalidSignal("not JSON") from None
    if not isinstance(body, dict):
        raise InvalidSignal("not an object")
    kind = KINDS.get(str(body.get("kind")))
    tenant_id, account_id, user_id = (
        body.get("tenant_id"),
        body.get("account_id"),
        body.get("user_id"),
    )
    if kind is None:
        raise InvalidSignal("unknown kind")
    if not isinstance(tenant_id, str):
        raise InvalidSignal("tenant_id")
    if not (account_id is None or isinstance(account_id, str)):
        raise InvalidSignal("account_id")
    if not (user_id is None or isinstance(user_id, str)):
        raise InvalidSignal("user_id")
    outbound_id = body.get("outbound_id")
    if not (outbound_id is None or isinstance(outbound_id, str)):
        raise InvalidSignal("outbound_id")
    return Signal(kind, tenant_id, account_id=account_id, user_id=user_id, outbound_id=outbound_id)


class _Channel(Protocol):
    """What listening uses of a pubsub; typed here because redis-py types it only from 8 on."""

    def subscribe(self, *channels: str) -> Any: ...

    def get_message(self, ignore_subscribe_messages: bool = ..., timeout: float = ...) -> Any: ...

    def ping(self, message: str | None = ...) -> Any: ...

    def close(self) -> None: ...


class _Subscribing(Protocol):
    def pubsub(self) -> _Channel: ...

    def close(self) -> None: ...


class RedisSignals:
    def __init__(
        self,
        publisher: redis.Redis,
        subscriber: redis.Redis | None = None,
        *,
        channel: str = CHANNEL,
        reconnect_base: float = 0.2,
        reconnect_cap: float = 10.0,
        healthy_after: float = 30.0,
        ping_interval: float = 10.0,
        owns_clients: bool = False,
    ) -> None:
        self._publisher = publisher
        self._subscriber: _Subscribing = subscriber if subscriber is not None else publisher
        self._channel = channel
        self._reconnect_base = reconnect_base
        self._reconnect_cap = reconnect_cap
        self._healthy_after = healthy_after
        self._ping_interval = ping_interval
        self._owns_clients = owns_clients
        self._callbacks: list[Callable[[Signal], None]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread: threading.Thread | None = None
        self._behind = WriteBehind(publisher, "signals", _publish_failed)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        channel: str = CHANNEL,
        timeout: float = 2.0,
        client_name: str | None = None,
        **options: Any,
    ) -> RedisSignals:
        """``client_name`` names the subscriber's connection (``CLIENT LIST``)."""
        # The subscriber gets its own client without retries: its loop does the reconnecting.
        subscriber = redis_client(url, timeout=timeout, retries=0, client_name=client_name)
        return cls(
            redis_client(url, timeout=timeout),
            subscriber,
            channel=channel,
            owns_clients=True,
            **options,
        )

    # --- SignalBus ---------------------------------------------------------------------

    def publish(self, signal: Signal) -> None:
        self._behind.put(Command("publish", (self._channel, encode(signal))))

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until the signals published so far are sent (or failed)."""
        return self._behind.flush(timeout)

    # --- subscribing -------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Signal], None]) -> None:
        with self._lock:
            if self._stop.is_set():
                raise RuntimeError("RedisSignals is closed")
            self._callbacks.append(callback)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="tidings-signals", daemon=True
                )
                self._thread.start()

    def wait_listening(self, timeout: float) -> bool:
        """True once the subscription is confirmed by Redis (signals published now arrive)."""
        return self._listening.wait(timeout)

    def close(self) -> None:
        self._behind.close()
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5.0)
        if self._owns_clients:
            self._publisher.close()
            self._subscriber.close()

    # --- the subscriber thread ---------------------------------------------------------

    def _run(self) -> None:
        delay = self._reconnect_base
        failures = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._listen(resumed_after=failures)
                return  # closed
            except RedisError as error:
                error_name = type(error).__name__
            except Exception as error:  # a bug must not end the thread: back off, go on
                log.exception(
                    "signals.subscriber_crashed channel=%s error=%s",
                    self._channel,
                    type(error).__name__,
                )
                error_name = type(error).__name__
            finally:
                self._listening.clear()
            if time.monotonic() - started >= self._healthy_after:
                delay, failures = self._reconnect_base, 0
            failures += 1
            log.warning(
                "signals.subscriber_lost channel=%s error=%s failures=%d retry_in=%.1f",
                self._channel,
                error_name,
                failures,
                delay,
            )
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, self._reconnect_cap)

    def _listen(self, resumed_after: int) -> None:
        pubsub = self._subscriber.pubsub()
        try:
            pubsub.subscribe(self._channel)
            heard = pinged = time.monotonic()
            while not self._stop.is_set():
                message = pubsub.get_message(timeout=min(0.25, self._ping_interval))
                now = time.monotonic()
                if message is not None:
                    heard = now
                    self._on_message(message, resumed_after)
                if now - heard > 2 * self._ping_interval:
                    raise redis.ConnectionError("no answer from Redis")
                if now - pinged >= self._ping_interval:
                    pubsub.ping(PING_PAYLOAD)
                    pinged = now
        finally:
            with contextlib.suppress(RedisError):  # the connection is gone anyway
                pubsub.close()

    def _on_message(self, message: dict[str, Any], resumed_after: int) -> None:
        kind = message.get("type")
        if kind == "subscribe":
            if resumed_after:
                log.info(
                    "signals.subscriber_resumed channel=%s after_failures=%d",
                    self._channel,
                    resumed_after,
                )
            self._listening.set()
            return
        if kind != "message":
            return
        try:
            signal = decode(message["data"])
        except InvalidSignal as error:
            log.warning("signals.invalid channel=%s reason=%s", self._channel, error)
            return
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(signal)
            except Exception as error:  # one bad callback must not stop the signals
                log.exception(
                    "signals.callback_failed kind=%s account_id=%s error=%s",
                    signal.kind,
                    signal.account_id,
                    type(error).__name__,
                )
