"""AccountSync during a database outage: the failure is an outcome, never an exception,
so a watch keeps its IDLE session (``store_unavailable`` is in ``KEEP_WATCHING``) and a
poll counts it as failed instead of crashing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from application.errors import StoreUnavailable
from application.mail.account_sync import AccountSync, SyncSettings
from workers.policies.watch_stops import KEEP_WATCHING


class DownStore:
    def load(self, stream_id: uuid.UUID) -> list[Any]:
        raise StoreUnavailable("connection refused")

    def existing(self, stream_ids: Any) -> set[uuid.UUID]:
        raise StoreUnavailable("connection refused")


class DownState:
    def record_failure(self, account_id: str, kind: str, at: datetime) -> None:
        raise StoreUnavailable("connection refused")


def test_an_unreachable_event_store_is_a_store_unavailable_outcome() -> None:
    ctx: Any = SimpleNamespace(
        store=DownStore(),
        mail=SimpleNamespace(state=DownState()),
        clock=SimpleNamespace(now=lambda: datetime(2026, 1, 1, tzinfo=UTC)),
    )
    unused: Any = object()  # nothing gets as far as parsing or completing
    syncer = AccountSync(ctx, unused, unused, SyncSettings())
    account_id = str(uuid.uuid4())
    outcome = syncer.sync(account_id)
    assert outcome.account_id == account_id
    assert outcome.error_kind == "store_unavailable"
    assert outcome.error_kind in KEEP_WATCHING
