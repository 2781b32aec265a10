"""``tidings worker --once``: one reconciliation pass over every syncable account."""

from __future__ import annotations

from collections.abc import Callable

from application.app import App
from application.mail.account_sync import AccountSync
from application.mail.sync_outcome import SyncOutcome
from workers.poll import Poller


def syncable_accounts(app: App) -> list[str]:
    app.projections.catch_up()  # the account list is a read model: bring it up to date
    return [row["accountId"] for row in app.ctx.mail.read_model.accounts(None, syncable_only=True)]


def poll_once(
    app: App,
    syncer: AccountSync,
    *,
    concurrency: int,
    deadline_seconds: float,
    on_done: Callable[[SyncOutcome], None] | None = None,
) -> list[SyncOutcome]:
    poller = Poller(syncer.sync, concurrency=concurrency, deadline_seconds=deadline_seconds)
    try:
        outcomes = poller.poll(syncable_accounts(app), on_done)
    finally:
        poller.close()
    app.projections.catch_up()
    return outcomes
