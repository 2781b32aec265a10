"""One account's due messages one after another, with the store's writes overlapped with
the SMTP exchange (``AccountSeries``, run by ``OutboundDelivery.run_series``).

Each message is claimed under the rules of a single attempt, and a message's ``sent`` is
recorded in one write with the ``sending`` of the next. Two things overlap the SMTP
transaction of message n instead of waiting behind it, on the delivery's I/O threads:

- the read of message n+1 and its account (its attempt opened in memory, not recorded);
- the write of n's ``sent`` with n+1's ``sending``, while n+1's MAIL, RCPT, DATA and its
  bytes go out. The end of its data (the lone dot) waits for that write: the server
  cannot take a message without it, so ``sending`` is still durable before the server
  can accept, and the crash outcomes are those of the writes done one after the other.
  When the write finds n+1 taken meanwhile (another worker's claim), the end is withheld
  and the connection closed: that worker sends it.

A message whose Sent copy this worker appends is recorded before the next starts (the
copy needs its ``sent``). A series ends after a transient failure (the server's trouble
is every next message's; a message read ahead is left to the scan) and after
``SERIES_LIMIT`` attempts (other accounts' turn).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING

from application.errors import ConcurrencyConflict
from application.mail.outbound.sent_copy import Kept
from application.streams import commit
from domain.mail_account import MailAccount
from domain.outbound import Outbound

if TYPE_CHECKING:
    from application.mail.outbound.delivery import OutboundDelivery

log = logging.getLogger("tidings.outbound")
SERIES_LIMIT = 100  # attempts on one account's messages before others get the thread
SERIES_LOOKS = 1000  # candidates one series looks at (a stale read model offers sent ones)

Recording = Future[tuple[bool, "Claim | None"]]


@dataclass
class Claim:
    """A message with its attempt opened (``sending``, committed or about to be)."""

    outbound: Outbound
    account: MailAccount


class AccountSeries:
    def __init__(
        self,
        delivery: OutboundDelivery,
        account_id: str,
        take: Callable[[], str | None],
        limit: int,
        stopping: Callable[[], bool],
    ) -> None:
        self._delivery = delivery
        self._picker = _Picker(delivery, account_id, take, limit, stopping)

    def run(self) -> int:
        """The number of attempts made."""
        delivery, picker = self._delivery, self._picker
        claim: Claim | None = None
        recording: Recording | None = None  # the write of ``claim``'s ``sending``
        attempts = 0
        while True:
            if claim is None:
                claim, recording = self._next(opened=True), None
                if claim is None:
                    return attempts
            attempts = picker.attempts = attempts + 1  # before the read ahead counts it
            saves = delivery.provider_saves(claim.account)
            ahead = delivery.io.submit(self._next, with_copy=not saves)
            outcome = delivery.submit(claim, _confirm(recording))
            if recording is not None:
                recording.exception()  # over (the end of data waited for it) before reuse
            following = ahead.result()
            if not isinstance(outcome, Kept):
                if outcome == "retrying":
                    return attempts
                claim, recording = self._opened(following), None
                continue
            if saves and following is not None:  # recorded while the next one goes out
                recording = delivery.io.submit(delivery.record_sent, claim.outbound, following)
                claim = following
                continue
            sent = claim
            recorded, claim = delivery.record_sent(sent.outbound, following)
            recording = None
            if recorded and not saves:
                delivery.save_copy(sent, outcome)

    def _opened(self, claim: Claim | None) -> Claim | None:
        """A claim read ahead, recorded now (the previous message was not sent)."""
        if claim is None:
            return None
        try:
            commit(self._delivery.ctx.store, claim.outbound)
        except ConcurrencyConflict:
            return None
        return claim

    def _next(self, *, opened: bool = False, with_copy: bool = False) -> Claim | None:
        """The series' next message with its attempt opened: committed (``opened``) or
        left for the caller's write. Lapsed, canceled or postponed ones are dealt with
        on the way, as ``run`` would."""
        delivery, picker = self._delivery, self._picker
        while (outbound_id := picker.next()) is not None:
            extra = delivery.settings.imap_timeout if with_copy else 0.0
            step = delivery.prepare(
                outbound_id, account_id=picker.account_id, extra_lease=extra, quiet=not opened
            )
            if not isinstance(step, Claim):
                continue
            if not opened:
                return step
            try:
                commit(delivery.ctx.store, step.outbound)
            except ConcurrencyConflict:
                continue
            return step
        return None


def _confirm(recording: Recording | None) -> Callable[[], bool] | None:
    """Whether the claim's write went through (the end of data waits for it)."""
    if recording is None:
        return None

    def confirm() -> bool:
        _recorded, after = recording.result()
        return after is not None

    return confirm


class _Picker:
    """A series' candidates: what the worker hands over (``take``), then the account's
    due messages in the read model; each at most once, at most ``limit`` in all."""

    def __init__(
        self,
        delivery: OutboundDelivery,
        account_id: str,
        take: Callable[[], str | None],
        limit: int,
        stopping: Callable[[], bool],
    ) -> None:
        self.account_id = account_id
        self._stopping = stopping
        self._delivery = delivery
        self._take = take
        self._limit = limit
        self._seen: set[str] = set()
        self._read: deque[str] = deque()
        self.attempts = 0

    def next(self) -> str | None:
        """The next candidate; None after ``limit`` attempts or ``SERIES_LOOKS``
        candidates, or when none is left."""
        while self.attempts < self._limit and len(self._seen) < SERIES_LOOKS:
            if self._stopping():
                return None
            outbound_id = self._take() or self._from_read_model()
            if outbound_id is None:
                return None
            if outbound_id not in self._seen:
                self._seen.add(outbound_id)
                return outbound_id
        return None

    def _from_read_model(self) -> str | None:
        if not self._read:
            outbox = self._delivery.ctx.mail.outbox
            if outbox is None:
                return None
            now = self._delivery.ctx.clock.now().astimezone(UTC).isoformat()
            # Rows the read model has not seen change yet come back: ask past them.
            rows = outbox.due_of_account(self.account_id, now, len(self._seen) + 16)
            self._read.extend(r for r in rows if r not in self._seen)
        return self._read.popleft() if self._read else None
