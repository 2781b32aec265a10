"""The one way this project builds a Redis client: short timeouts, one quick retry."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

T = TypeVar("T")


def replied(answer: Awaitable[T] | T) -> T:
    """A synchronous client's answer as its own type: redis-py before 8 types every command of
    the synchronous client as ``Awaitable[Any] | Any``."""
    if inspect.isawaitable(answer):
        raise TypeError("a synchronous Redis client answered with an awaitable")
    return answer


def redis_client(
    url: str, *, timeout: float = 2.0, retries: int = 1, client_name: str | None = None
) -> redis.Redis:
    """A client that never blocks long: connect/read timeouts, at most ``retries`` quick retries
    on a fresh connection. ``client_name`` shows in ``CLIENT LIST``."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), retries),
        client_name=client_name,
        decode_responses=True,
    )
