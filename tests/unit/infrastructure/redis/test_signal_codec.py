"""The signal codec of ``RedisSignals``: a round trip, and every malformed message
refused with ``InvalidSignal`` (a message on the channel is data, not trusted)."""

from __future__ import annotations

import pytest

from application.signals import Signal
from infrastructure.redis.signals import InvalidSignal, decode, encode


def test_signals_encode_and_decode() -> None:
    signal = Signal("account_changed", "t1", account_id="a1")
    assert decode(encode(signal)) == signal
    assert decode(encode(signal).encode()) == signal
    queued = Signal("outbound_queued", "t1", account_id="a1", outbound_id="o1")
    assert decode(encode(queued)) == queued
    for bad in [
        "[]",
        "{}",
        '{"kind": "sync_now"}',
        '{"kind": "sync_now", "tenant_id": 1}',
        '{"kind": "sync_now", "tenant_id": "t", "account_id": 5}',
        '{"kind": "outbound_queued", "tenant_id": "t", "outbound_id": ["x"]}',
        "\xff",
    ]:
        with pytest.raises(InvalidSignal):
            decode(bad)
