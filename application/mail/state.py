"""Operational state of each mailbox: the sync cursor and health counters.

This is not domain history — it changes on every poll — so it lives in a plain table
written by workers, not in the event log. The cursor is saved only after its batch
was ingested; a crash in between re-fetches the batch and dedup absorbs it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from application.mail.ports import MailboxCursor


class ErrorKind(StrEnum):
    """Why a sync or a watch of one account failed: ``lastErrorKind`` and the metrics' label."""

    AUTH = "auth"  # the server refused the credentials: status auth_error
    THROTTLED = "throttled"  # the server asked us to slow down
    TRANSIENT = "transient"  # network, server or protocol trouble: next tick
    HOST_NOT_ALLOWED = "host_not_allowed"  # the host resolves inside: checked again next tick
    TIMEOUT = "timeout"  # the operation's deadline passed
    INGEST_CONFLICT = "ingest_conflict"  # a concurrent writer won: dedup absorbs it
    INGEST_FAILED = "ingest_failed"  # a page could not be stored (a value out of range)
    STORE_UNAVAILABLE = "store_unavailable"  # our own database was down
    CRASH = "crash"  # a bug of ours, logged with its traceback
    ERROR = "error"  # a failure with no finer kind


@dataclass(frozen=True)
class MailboxHealth:
    account_id: str
    last_sync_at: datetime | None = None
    last_error_kind: str | None = None
    consecutive_failures: int = 0
    watch_state: str = "idle"
    tier: str = "warm"


@dataclass(frozen=True)
class TimelineBucket:
    start: int  # unix seconds the bucket begins at
    kind: str  # "synced", "failed:<error kind>" or "tier:<tier>"
    count: int


class MailboxStateStore(Protocol):
    def cursor(self, account_id: str) -> MailboxCursor | None: ...

    def cursors(self, account_ids: Collection[str]) -> dict[str, MailboxCursor]:
        """``cursor`` of several accounts in one read; an account without one is absent."""
        ...

    def save_cursor(self, account_id: str, cursor: MailboxCursor | None) -> None: ...

    def record_synced(self, cursors: Mapping[str, MailboxCursor | None], at: datetime) -> None:
        """Save each account's cursor and mark its sync successful, in one write."""
        ...

    def record_failure(self, account_id: str, error_kind: ErrorKind, at: datetime) -> None: ...

    def record_watches(self, worker_id: str, changes: Mapping[str, tuple[str, str] | None]) -> None:
        """Per account, the ``(watch_state, tier)`` ``worker_id`` reports, or ``None``: it
        reports the account no more (the row is reset unless another worker wrote it
        since). One write for the batch."""
        ...

    def health(self, account_ids: Iterable[str]) -> dict[str, MailboxHealth]: ...

    def timeline(self, account_id: str, since: datetime) -> list[TimelineBucket]:
        """The account's syncs, failures (``failed:<kind>``) and reported tiers
        (``tier:<tier>``) counted per bucket since ``since``, oldest first."""
        ...

    def forget(self, account_id: str) -> None: ...
