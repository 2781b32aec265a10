"""Mail retention on a message's stream: its body erased past the tenant's
``bodiesFor``, the message itself expired past ``messagesFor`` (``domain.mail_retention``).

State of one message, by its stream: live -> body erased (``MessageBodyErased``) ->
expired (``MessageExpired``), or live -> expired at once; both final, each recorded at
most once. An expiry takes the body with it. A ``deferred`` message (its body not fetched
yet) is neither erased nor expired until its body came or vanished, so its second event
stays the one at version 2 (``domain.message``). A message with no body (``too_large``,
``vanished``) has nothing to erase. Times compare as ``received_at`` text (UTC ISO 8601,
sortable): a message is due when ``received_at <= cutoff``.

Events of other kinds on the stream (flags, folders) only move its version.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar
from uuid import UUID

from domain.events import Aggregate, DomainEvent
from domain.message import MessageBodyFetched, MessageBodyVanished, MessageIngested


@dataclass(frozen=True, kw_only=True)
class MessageBodyErased(DomainEvent):
    """The message's body, attachments and raw MIME are erased (past ``bodiesFor``)."""

    TOPIC: ClassVar[str] = "tidings.mail.MessageBodyErased"

    tenant_id: str
    account_id: str
    body_ref: str  # the blob destroyed
    keep_for: str  # the tenant's bodiesFor at the time


@dataclass(frozen=True, kw_only=True)
class MessageExpired(DomainEvent):
    """The message is deleted (past ``messagesFor``), its body with it."""

    TOPIC: ClassVar[str] = "tidings.mail.MessageExpired"

    tenant_id: str
    account_id: str
    body_ref: str | None  # the blob destroyed with it (None: none was left)
    keep_for: str  # the tenant's messagesFor at the time


EVENTS: tuple[type[DomainEvent], ...] = (MessageBodyErased, MessageExpired)


class MessageLife(Aggregate):
    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.tenant_id = ""
        self.account_id = ""
        self.received_at = ""
        self.state = ""
        self.body_ref: str | None = None
        self.body_erased = False
        self.expired = False

    def _due(self, cutoff: str) -> bool:
        live = self.version > 0 and not self.expired and self.state not in ("", "deferred")
        return live and self.received_at <= cutoff

    def erase_body(self, *, cutoff: str, keep_for: str, now: datetime) -> str | None:
        """Record the body's erasure when due; the blob ref to destroy, else None."""
        if not self._due(cutoff) or self.body_erased or self.body_ref is None:
            return None
        ref = self.body_ref
        self._trigger(
            MessageBodyErased,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            body_ref=ref,
            keep_for=keep_for,
        )
        return ref

    def expire(self, *, cutoff: str, keep_for: str, now: datetime) -> bool:
        """Record the message's expiry when due (its blob, if any, ``body_ref`` before)."""
        if not self._due(cutoff):
            return False
        self._trigger(
            MessageExpired,
            now,
            tenant_id=self.tenant_id,
            account_id=self.account_id,
            body_ref=None if self.body_erased else self.body_ref,
            keep_for=keep_for,
        )
        return True

    def mutate(self, event: DomainEvent) -> None:
        match event:
            case MessageIngested():
                self.tenant_id = event.tenant_id
                self.account_id = event.account_id
                self.received_at = event.received_at
                self.state = event.state
                self.body_ref = event.body_ref
            case MessageBodyFetched():
                self.state = event.state
                self.body_ref = event.body_ref
            case MessageBodyVanished():
                self.state = "vanished"
                self.body_ref = None
            case MessageBodyErased():
                self.body_erased = True
                self.body_ref = None
            case MessageExpired():
                self.expired = True
                self.body_erased = True
                self.body_ref = None
