"""A tenant's mail retention: how long its messages' bodies and the messages are kept.

``bodies_for``: past it (from the message's arrival) a message's body, attachments and
raw MIME are erased; ``messages_for``: past it the message itself is deleted. Each is a
``keepFor`` (``domain.retention``: 30 days to 10 years) or None (kept for ever); when
both are set, ``messages_for`` is not the shorter (a body never outlives its message).

One ``TenantMailRetention`` stream per tenant. Its state: no event yet -> the operator's
default applies; ``MailRetentionSet`` with a policy -> that policy; ``MailRetentionSet``
with ``policy`` None -> the operator's default again. Each event holds the whole
policy, so the last one decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from domain.events import Aggregate, DomainEvent
from domain.identity import stream_id
from domain.retention import InvalidRetention, check_keep_for, keep_for_days


@dataclass(frozen=True)
class MailRetention:
    bodies_for: str | None = None
    messages_for: str | None = None

    def __post_init__(self) -> None:
        for name, keep_for in (("bodiesFor", self.bodies_for), ("messagesFor", self.messages_for)):
            if keep_for is not None:
                try:
                    check_keep_for(keep_for)
                except InvalidRetention as invalid:
                    raise InvalidRetention(f"{name}: {invalid}") from None
        if (
            self.bodies_for is not None
            and self.messages_for is not None
            and keep_for_days(self.messages_for) < keep_for_days(self.bodies_for)
        ):
            raise InvalidRetention("messagesFor must not be shorter than bodiesFor")

    def to_json(self) -> dict[str, Any]:
        return {"bodiesFor": self.bodies_for, "messagesFor": self.messages_for}

    @staticmethod
    def from_json(data: Any) -> MailRetention | None:
        if data is None:
            return None
        if not isinstance(data, dict) or set(data) != {"bodiesFor", "messagesFor"}:
            raise InvalidRetention('expected {"bodiesFor": ..., "messagesFor": ...}')
        return MailRetention(bodies_for=data["bodiesFor"], messages_for=data["messagesFor"])


KEPT_FOR_EVER = MailRetention()


@dataclass(frozen=True, kw_only=True)
class MailRetentionSet(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.MailRetentionSet"

    tenant_id: str
    policy: dict[str, Any] | None  # MailRetention.to_json(); None: the operator's default
    set_by: str


EVENTS: tuple[type[DomainEvent], ...] = (MailRetentionSet,)


class TenantMailRetention(Aggregate):
    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.policy: MailRetention | None = None  # None: the operator's default

    @staticmethod
    def id_for(tenant_id: str) -> UUID:
        return stream_id("mail-retention", tenant_id)

    def set(self, *, tenant_id: str, policy: MailRetention | None, by: str, now: datetime) -> bool:
        """Record the tenant's policy (None: back to the default); False when unchanged."""
        if self.version > 0 and policy == self.policy:
            return False
        self._trigger(
            MailRetentionSet,
            now,
            tenant_id=tenant_id,
            policy=None if policy is None else policy.to_json(),
            set_by=by,
        )
        return True

    def mutate(self, event: DomainEvent) -> None:
        if isinstance(event, MailRetentionSet):
            self.policy = MailRetention.from_json(event.policy)
