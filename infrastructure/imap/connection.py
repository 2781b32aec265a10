"""``Connection``: one logged-in imapclient connection, its deadlines and its failures.

State machine: OPEN --a transient or throttling error--> BROKEN --close--> CLOSED;
OPEN --close--> CLOSED. Every call (``io``) is one operation under a total deadline
enforced where bytes are read (``wire.Wire.operation``); any error is translated by
``errors.classify`` and raised ``from None``. A BROKEN connection raises
``MailboxTransientError`` at once and ``close`` only shuts its socket (no LOGOUT round
trip on a connection that may be dead).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from application.mail.ports import (
    MailboxThrottled,
    MailboxTransientError,
    MailProviderError,
)
from infrastructure.imap.errors import classify
from infrastructure.imap.settings import ImapAdapterSettings
from infrastructure.imap.wire import Wire

log = logging.getLogger("tidings.imap")
T = TypeVar("T")


class Connection:
    def __init__(
        self,
        client: Any,
        *,
        account_id: str,
        settings: ImapAdapterSettings,
        wire: Wire | None = None,
    ) -> None:
        self.client = client
        self.account_id = account_id
        self.settings = settings
        self.wire = wire  # None: a stand-in client without a guarded socket (unit tests)
        self.closed = False
        self.broken = False

    def io(self, fn: Callable[..., T], *args: Any) -> T:
        if self.broken or self.closed:
            raise MailboxTransientError("session unusable after an earlier failure or close")
        try:
            with self._operation():
                return fn(*args)
        except MailProviderError as exc:
            raise self.fail(exc) from None
        except Exception as exc:
            raise self.fail(classify(exc), cause=exc) from None

    def _operation(self) -> contextlib.AbstractContextManager[None]:
        if self.wire is None:
            return contextlib.nullcontext()
        return self.wire.operation(self.settings.operation_timeout)

    def take_refused(self) -> int:
        """How many literals were refused for their size since the last call."""
        return self.wire.take_refused() if self.wire is not None else 0

    def fail(self, err: MailProviderError, cause: BaseException | None = None) -> MailProviderError:
        if isinstance(err, MailboxTransientError | MailboxThrottled):
            self.broken = True  # the connection's state is unknown: drop it
        log.warning(
            "imap.error account_id=%s error_class=%s cause=%s",
            self.account_id,
            type(err).__name__,
            type(cause).__name__ if cause else "-",
        )
        return err

    def skipped(self, uid: int, reason: str) -> None:
        """A message whose server values are unusable: passed, with the reason logged."""
        log.warning("imap.skipped account_id=%s uid=%d reason=%s", self.account_id, uid, reason)

    def close(self, *, logout: bool) -> None:
        """LOGOUT when ``logout`` and the connection is sound, else drop the socket."""
        if self.closed:
            return
        self.closed = True
        if logout and not self.broken:
            with contextlib.suppress(Exception), self._operation():
                self.client.logout()
                return
        with contextlib.suppress(Exception):
            self.client.shutdown()
