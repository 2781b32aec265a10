"""What one account's sync came to (``SyncOutcome``), and why a failed one failed: the
``ErrorKind`` of the error's class (``error_kind``), the one classification every path
uses (the poll, the watch path, the verification of ``connect-mail-account``)."""

from __future__ import annotations

from dataclasses import dataclass

from application.destinations import HostNotAllowed
from application.errors import ApplicationError, ConcurrencyConflict, StoreUnavailable
from application.mail.incoming import PageRefused
from application.mail.ports import (
    MailboxAuthError,
    MailboxCursor,
    MailboxThrottled,
    MailboxTimeout,
    MailProviderError,
)
from application.mail.state import ErrorKind


@dataclass(frozen=True)
class SyncOutcome:
    account_id: str
    ingested: int = 0
    duplicates: int = 0
    error_kind: ErrorKind | None = None
    retry_after: float | None = None
    skipped: bool = False
    has_more: bool = False  # a page was ingested and another waits (the watch path pages)
    completed: int = 0  # deferred messages whose bodies came (or that vanished)
    cursor: MailboxCursor | None = None  # the watch path: the cursor its page saved
    listed: bool = False  # the poll listed the account's folders again

    @property
    def ok(self) -> bool:
        return self.error_kind is None


class DeadlineExceeded(ApplicationError):
    """The account's poll deadline passed between two pages."""


# What ends one account's sync as a failure of its own class (``AccountSync.failed``).
SYNC_ERRORS = (
    MailProviderError,
    DeadlineExceeded,
    ConcurrencyConflict,
    StoreUnavailable,
    PageRefused,
)


def error_kind(error: Exception) -> ErrorKind:  # noqa: PLR0911
    """The kind of a failure, by the error's class (order matters: subclasses first)."""
    if isinstance(error, MailboxAuthError):
        return ErrorKind.AUTH
    if isinstance(error, MailboxThrottled):
        return ErrorKind.THROTTLED
    if isinstance(error, ConcurrencyConflict):
        return ErrorKind.INGEST_CONFLICT
    if isinstance(error, StoreUnavailable):
        return ErrorKind.STORE_UNAVAILABLE
    if isinstance(error, MailboxTimeout | DeadlineExceeded):
        return ErrorKind.TIMEOUT
    if isinstance(error, HostNotAllowed):
        return ErrorKind.HOST_NOT_ALLOWED
    if isinstance(error, MailProviderError):
        return ErrorKind.TRANSIENT
    return ErrorKind.INGEST_FAILED  # PageRefused, or a page that could not be stored
