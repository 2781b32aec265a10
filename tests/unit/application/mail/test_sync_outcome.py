"""error_kind: the one classification of a sync's failure, subclasses before their bases
(an auth error is no transient one, a timeout no mere unreachable server)."""

from __future__ import annotations

import pytest

from application.destinations import HostNotAllowed
from application.errors import ConcurrencyConflict, StoreUnavailable
from application.mail.incoming import PageRefused
from application.mail.ports import (
    MailboxAuthError,
    MailboxReauthRequired,
    MailboxThrottled,
    MailboxTimeout,
    MailboxTransientError,
    MailboxUnreachable,
    MailProviderError,
)
from application.mail.state import ErrorKind
from application.mail.sync_outcome import DeadlineExceeded, error_kind


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (MailboxAuthError("refused"), ErrorKind.AUTH),
        (MailboxReauthRequired("invalid_grant"), ErrorKind.AUTH),
        (MailboxThrottled("slow down", retry_after=5.0), ErrorKind.THROTTLED),
        (ConcurrencyConflict("taken"), ErrorKind.INGEST_CONFLICT),
        (StoreUnavailable("down"), ErrorKind.STORE_UNAVAILABLE),
        (MailboxTimeout("late"), ErrorKind.TIMEOUT),
        (DeadlineExceeded("poll deadline"), ErrorKind.TIMEOUT),
        (HostNotAllowed("imap.internal"), ErrorKind.HOST_NOT_ALLOWED),
        (MailboxUnreachable("no route"), ErrorKind.TRANSIENT),
        (MailboxTransientError("reset"), ErrorKind.TRANSIENT),
        (MailProviderError("odd answer"), ErrorKind.TRANSIENT),
        (PageRefused("cursor out of range"), ErrorKind.INGEST_FAILED),
        (RuntimeError("a page that could not be stored"), ErrorKind.INGEST_FAILED),
    ],
)
def test_every_failure_has_one_kind(error: Exception, kind: ErrorKind) -> None:
    assert error_kind(error) is kind
