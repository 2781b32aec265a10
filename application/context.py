"""What handlers get to work with: ports and the policy knobs from settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from application.custom_fields.ports import CustomFieldsReadModel
from application.mail.context import MailPorts
from application.ports import Clock, EventStore
from application.privacy import PiiCipher
from application.users import TENANT_ADMIN, TENANT_MEMBER


@dataclass(frozen=True)
class Policy:
    field_definition_limit_per_tenant: int | None = None
    field_definition_write_roles: frozenset[str] = frozenset({TENANT_ADMIN})
    value_write_roles: frozenset[str] = frozenset({TENANT_ADMIN, TENANT_MEMBER})


@dataclass(frozen=True)
class Context:
    store: EventStore
    clock: Clock
    custom_fields: CustomFieldsReadModel
    policy: Policy = field(default_factory=Policy)
    mail_ports: MailPorts | None = None
    keys: PiiCipher | None = None  # None: the mail ports' key ring

    @property
    def cipher(self) -> PiiCipher:
        """Seals tenant data (custom-field values); the same key ring as mail's."""
        return self.keys if self.keys is not None else self.mail.cipher

    @property
    def mail(self) -> MailPorts:
        if self.mail_ports is None:
            raise RuntimeError("mail ports are not wired (composition root bug)")
        return self.mail_ports
