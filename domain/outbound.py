"""Outbound messages: mail a tenant sends from one of its accounts, one stream per
(account, idempotency key), opened by ``OutboundQueued``.

States::

    queued --attempt--> sending --sent--> sent (final, with the server's reply)
    retrying --attempt--> sending --retry--> retrying (4xx, network: a next-attempt time)
                          sending --fail--> failed (final: 5xx, with the reply)
                          sending --uncertain--> uncertain (final: never resent on its own)
    queued|retrying --cancel--> canceled (final)

``sending`` is recorded before the SMTP transaction starts, with the attempt's holder and
the time its claim lapses (``lease_until``): the event store's version check lets exactly
one worker open each attempt, and a ``sending`` whose claim lapsed belongs to a worker
that died mid-attempt. Such a message may have reached the server's DATA, so it is never
simply retried: the worker that finds it searches the account's Sent folder for its
Message-ID and records ``sent`` (found) or ``uncertain`` (``resolve``).

After ``sent`` the copy for the Sent folder is appended; an APPEND that failed is
retried later (``copy_retrying``: a next try, at most ``MAX_COPY_ATTEMPTS`` tries, then
``copy_saved(outcome="failed")``). A retry first records itself as a claim (a
``OutboundCopyRetrying`` whose next try lies past its own end), so one worker makes it.

Personal values (recipients, subject, body parts, the Message-ID, the payload's digest)
arrive sealed under the account's key; events hold ciphertext tokens only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal
from uuid import UUID

from domain.errors import DomainError
from domain.events import Aggregate, DomainEvent
from domain.identity import stream_id

OutboundState = Literal["queued", "sending", "sent", "retrying", "failed", "canceled", "uncertain"]
OUTBOUND_STATES: tuple[OutboundState, ...] = (
    "queued",
    "sending",
    "sent",
    "retrying",
    "failed",
    "canceled",
    "uncertain",
)
FINAL_STATES = frozenset({"sent", "failed", "canceled", "uncertain"})
MAX_REPLY_CHARS = 1000  # a server's reply as recorded (the rest is cut)
MAX_COPY_ATTEMPTS = 5  # appends of the Sent copy (the first one and its retries)


class OutboundError(DomainError):
    pass


class NotCancelable(OutboundError):
    """Only a message still waiting (queued or retrying) can be canceled."""


class NotDue(OutboundError):
    """An attempt on a message that is not waiting, or not yet due."""


def outbound_id(account_id: str, idempotency_key: str) -> UUID:
    """The same key for the same account always names the same message."""
    return stream_id("outbound", account_id, idempotency_key)


def bounded_reply(reply: str) -> str:
    """A server's reply as recorded: printable, on one line, at most ``MAX_REPLY_CHARS``."""
    text = "".join(ch if ch.isprintable() else " " for ch in reply)
    return text[:MAX_REPLY_CHARS]


@dataclass(frozen=True, kw_only=True)
class OutboundQueued(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.OutboundQueued"

    tenant_id: str
    account_id: str
    queued_by: str
    digest: str  # ciphertext: the payload's digest (the same key with another payload: 409)
    message_id_header: str  # ciphertext: ours, made now, the same for every attempt
    envelope: str  # ciphertext (JSON: to, cc, bcc)
    subject: str  # ciphertext
    content: str  # ciphertext: the composed message (with Bcc), its bytes as latin-1 text
    recipients: int
    size_bytes: int  # the composed message, as measured at queue time


@dataclass(frozen=True, kw_only=True)
class OutboundSending(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.OutboundSending"

    tenant_id: str
    account_id: str
    attempt: int
    holder: str
    lease_until: str  # ISO 8601 (UTC)


@dataclass(frozen=True, kw_only=True)
class OutboundSent(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.OutboundSent"

    tenant_id: str
    account_id: str
    attempt: int
    reply: str
    found_in: str | None  # "sent_folder": a lapsed attempt resolved by the Sent copy


@dataclass(frozen=True, kw_only=True)
class OutboundRetrying(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.OutboundRetrying"

    tenant_id: str
    account_id: str
    attempt: int
    reply: str
    error_kind: str
    next_attempt_at: str  # ISO 8601 (UTC)


@dataclass(frozen=True, kw_only=True)
class OutboundFailed(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.OutboundFailed"

    tenant_id: str
    account_id: str
    attempt: int
    reply: str
    error_kind: str


@dataclass(frozen=True, kw_only=True)
class OutboundUncertain(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.OutboundUncertain"

    tenant_id: str
    account_id: str
    attempt: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class OutboundCanceled(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.OutboundCanceled"

    tenant_id: str
    account_id: str
    canceled_by: str


@dataclass(frozen=True, kw_only=True)
class OutboundCopySaved(DomainEvent):
    """What became of the copy in Sent after a send: ``appended``, ``provider`` (the
    provider keeps one itself), ``no_sent_folder`` or ``failed``."""

    TOPIC: ClassVar[str] = "tidings.mail.OutboundCopySaved"

    tenant_id: str
    account_id: str
    outcome: str


@dataclass(frozen=True, kw_only=True)
class OutboundCopyRetrying(DomainEvent):
    """The copy in Sent is not there yet: tried again at ``next_attempt_at``. ``error``
    says why (``claimed``: a worker is trying it now, until then)."""

    TOPIC: ClassVar[str] = "tidings.mail.OutboundCopyRetrying"

    tenant_id: str
    account_id: str
    copy_attempt: int
    error: str
    next_attempt_at: str  # ISO 8601 (UTC)


EVENTS: tuple[type[DomainEvent], ...] = (
    OutboundQueued,
    OutboundSending,
    OutboundSent,
    OutboundRetrying,
    OutboundFailed,
    OutboundUncertain,
    OutboundCanceled,
    OutboundCopySaved,
    OutboundCopyRetrying,
)


class Outbound(Aggregate):
    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.state: OutboundState | None = None
        self.tenant_id = ""
        self.account_id = ""
        self.queued: OutboundQueued | None = None
        self.attempts = 0
        self.holder: str | None = None
        self.lease_until: datetime | None = None
        self.next_attempt_at: datetime | None = None
        self.reply: str | None = None
        self.copy: str | None = None  # None: not yet; "retrying"; else its outcome
        self.copy_attempts = 0
        self.copy_next_at: datetime | None = None

    @property
    def exists(self) -> bool:
        return self.state is not None

    def queue(self, event: OutboundQueued) -> None:
        if self.state is not None:
            raise OutboundError("outbound message already queued")
        self._apply(event)
        self.pending.append(event)

    def due(self, now: datetime) -> bool:
        if self.state == "queued":
            return True
        return self.state == "retrying" and (
            self.next_attempt_at is None or self.next_attempt_at <= now
        )

    def lapsed(self, now: datetime) -> bool:
        """A ``sending`` whose holder's claim ran out: that worker died mid-attempt."""
        return self.state == "sending" and self.lease_until is not None and self.lease_until < now

    def start_attempt(self, *, holder: str, lease_until: datetime, now: datetime) -> int:
        if not self.due(now):
            raise NotDue(str(self.id))
        self._trigger(
            OutboundSending,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            attempt=self.attempts + 1,
            holder=holder,
            lease_until=lease_until.isoformat(),
        )
        return self.attempts

    def _attempt_of(self, holder: str) -> int:
        if self.state != "sending" or self.holder != holder:
            raise OutboundError(f"{holder} holds no attempt on {self.id}")
        return self.attempts

    def sent(self, *, holder: str, reply: str, now: datetime) -> None:
        attempt = self._attempt_of(holder)
        self._trigger(
            OutboundSent,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            attempt=attempt,
            reply=bounded_reply(reply),
            found_in=None,
        )

    def retry(
        self, *, holder: str, reply: str, error_kind: str, next_attempt_at: datetime, now: datetime
    ) -> None:
        attempt = self._attempt_of(holder)
        self._trigger(
            OutboundRetrying,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            attempt=attempt,
            reply=bounded_reply(reply),
            error_kind=error_kind,
            next_attempt_at=next_attempt_at.isoformat(),
        )

    def fail(self, *, holder: str, reply: str, error_kind: str, now: datetime) -> None:
        attempt = self._attempt_of(holder)
        self._trigger(
            OutboundFailed,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            attempt=attempt,
            reply=bounded_reply(reply),
            error_kind=error_kind,
        )

    def resolve(
        self, *, found: bool, reason: str, now: datetime, holder: str | None = None
    ) -> None:
        """An attempt that may have reached the server, decided by the Sent folder:
        ``sent`` when its copy is there, else ``uncertain``. ``holder``: the attempt's
        own worker (no final answer came); None: another worker, after the claim lapsed."""
        if holder is not None:
            self._attempt_of(holder)
        elif not self.lapsed(now):
            raise OutboundError(f"{self.id} has no lapsed attempt")
        fields = {"tenant_id": self.tenant_id, "account_id": self.account_id}
        if found:
            self._trigger(
                OutboundSent, now, **fields, attempt=self.attempts, reply="", found_in="sent_folder"
            )
        else:
            self._trigger(OutboundUncertain, now, **fields, attempt=self.attempts, reason=reason)

    def postpone(self, *, reason: str, next_attempt_at: datetime, now: datetime) -> None:
        """A waiting message that cannot be attempted now (its account is not active):
        ``retrying`` later, no attempt made."""
        if not self.due(now):
            raise NotDue(str(self.id))
        self._trigger(
            OutboundRetrying,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            attempt=self.attempts,
            reply="",
            error_kind=reason,
            next_attempt_at=next_attempt_at.isoformat(),
        )

    def cancel(self, *, by: str, now: datetime) -> None:
        if self.state not in ("queued", "retrying"):
            raise NotCancelable(str(self.state))
        self._trigger(
            OutboundCanceled,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            canceled_by=by,
        )

    def copy_due(self, now: datetime) -> bool:
        """A Sent copy whose retry is due (a claim of another worker lapsed too)."""
        return (
            self.state == "sent"
            and self.copy == "retrying"
            and (self.copy_next_at is None or self.copy_next_at <= now)
        )

    def copy_retrying(self, *, error: str, next_attempt_at: datetime, now: datetime) -> None:
        """The copy failed (``error``) or is being tried (``claimed``): next try then."""
        if self.state != "sent" or self.copy not in (None, "retrying"):
            raise OutboundError(f"{self.id}: no copy to retry")
        tried = self.copy_attempts
        self._trigger(
            OutboundCopyRetrying,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            # A claim opens the next try; a failure belongs to the try it ends.
            copy_attempt=tried + 1 if error == "claimed" else max(tried, 1),
            error=bounded_reply(error),
            next_attempt_at=next_attempt_at.isoformat(),
        )

    def copy_saved(self, *, outcome: str, now: datetime) -> None:
        if self.state != "sent" or self.copy not in (None, "retrying"):
            raise OutboundError(f"{self.id}: no copy to record")
        self._trigger(
            OutboundCopySaved,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            outcome=outcome,
        )

    def mutate(self, event: DomainEvent) -> None:
        if isinstance(event, OutboundQueued):
            self.state = "queued"
            self.tenant_id, self.account_id = event.tenant_id, event.account_id
            self.queued = event
        elif isinstance(event, OutboundSending):
            self.state = "sending"
            self.attempts = event.attempt
            self.holder = event.holder
            self.lease_until = datetime.fromisoformat(event.lease_until)
        elif isinstance(event, OutboundSent):
            self.state, self.reply = "sent", event.reply
        elif isinstance(event, OutboundRetrying):
            self.state, self.reply = "retrying", event.reply
            self.next_attempt_at = datetime.fromisoformat(event.next_attempt_at)
        elif isinstance(event, OutboundFailed):
            self.state, self.reply = "failed", event.reply
        elif isinstance(event, OutboundUncertain):
            self.state = "uncertain"
        elif isinstance(event, OutboundCanceled):
            self.state = "canceled"
        elif isinstance(event, OutboundCopySaved):
            self.copy = event.outcome
        elif isinstance(event, OutboundCopyRetrying):
            self.copy = "retrying"
            self.copy_attempts = event.copy_attempt
            self.copy_next_at = datetime.fromisoformat(event.next_attempt_at)
