"""Signals from the app layer to the workers (account state changes, sync requests,
user activity). Delivery is best effort and fast; the periodic poll stays the
correctness anchor, so a lost signal only delays work."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

SignalKind = Literal["account_changed", "sync_now", "user_active", "outbound_queued"]


@dataclass(frozen=True)
class Signal:
    kind: SignalKind
    tenant_id: str
    account_id: str | None = None
    user_id: str | None = None
    outbound_id: str | None = None  # ``outbound_queued``: the message to attempt now


class SignalBus(Protocol):
    def publish(self, signal: Signal) -> None: ...


class SignalSubscriber(Protocol):
    """Workers listen here; the callback runs on the bus's own thread."""

    def subscribe(self, callback: Callable[[Signal], None]) -> None: ...
