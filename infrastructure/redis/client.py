"""The one way this project builds a Redis client: short timeouts, one quick retry."""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


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
