"""Mail accounts: a tenant's connected mailbox.

State machine (``status``):

    connect -> active
    active --auth_failed--> auth_error --reconnect--> active
    active --reauth_required--> reauth_required --reconnect--> active
    active|auth_error --disconnect--> disconnected --reconnect--> active
    any but deleted --delete--> deleted (final)

``reauth_required``: the OAuth2 token server refused the refresh token (a revoked
grant); ids, cursor and messages stay, and a reconnect with a new refresh token resumes
the account where it was.

Disconnecting twice is not an error (the second is a no-op); reconnecting an active
account is a no-op. Personal data (address, display name, username) reaches this
module already encrypted: events hold ciphertext tokens only, never the secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID

from domain.errors import DomainError
from domain.events import Aggregate, DomainEvent

Status = Literal["active", "auth_error", "reauth_required", "disconnected", "deleted"]


class MailAccountError(DomainError):
    pass


class AccountDeleted(MailAccountError):
    pass


class AccountDisconnected(MailAccountError):
    pass


@dataclass(frozen=True, kw_only=True)
class MailAccountConnected(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.MailAccountConnected"

    tenant_id: str
    owner_user_id: str | None
    scope: str
    provider: str
    auth_method: str
    display_name: str  # ciphertext
    address: str  # ciphertext
    imap: dict[str, Any]  # host, port, security; username as ciphertext
    trusted_authserv_id: str | None


@dataclass(frozen=True, kw_only=True)
class MailAccountUpdated(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.MailAccountUpdated"

    tenant_id: str
    # display_name / imap / trusted_authserv_id / secret_rotated / folders ("special",
    # "all" or a list of names: the ``folders`` setting, checked by the application)
    changes: dict[str, Any]
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class MailAccountAuthFailed(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.MailAccountAuthFailed"

    tenant_id: str
    error_kind: str


@dataclass(frozen=True, kw_only=True)
class MailAccountReauthRequired(DomainEvent):
    """The token server refused the account's refresh token (``invalid_grant``)."""

    TOPIC: ClassVar[str] = "tidings.mail.MailAccountReauthRequired"

    tenant_id: str
    error_kind: str


@dataclass(frozen=True, kw_only=True)
class MailAccountDisconnected(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.MailAccountDisconnected"

    tenant_id: str


@dataclass(frozen=True, kw_only=True)
class MailAccountReconnected(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.MailAccountReconnected"

    tenant_id: str


@dataclass(frozen=True, kw_only=True)
class MailAccountDeleted(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.mail.MailAccountDeleted"

    tenant_id: str


class MailAccount(Aggregate):
    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.tenant_id = ""
        self.owner_user_id: str | None = None
        self.scope = "shared"
        self.auth_method: Literal["password", "xoauth2"] = "password"
        self.status: Status | None = None
        self.trusted_authserv_id: str | None = None
        self.imap: dict[str, Any] = {}
        self.address = ""  # ciphertext: whose From makes a message outbound
        self.folders: str | list[str] = "special"  # which folders are synced

    @property
    def exists(self) -> bool:
        return self.status is not None and self.status != "deleted"

    def _require_exists(self) -> None:
        if not self.exists:
            raise AccountDeleted(str(self.id))

    def connect(self, *, now: datetime, **fields: Any) -> None:
        if self.status is not None:
            raise MailAccountError("account already exists")
        self._trigger(MailAccountConnected, now, **fields)

    def update(self, *, changes: dict[str, Any], reason: str | None, now: datetime) -> None:
        self._require_exists()
        if self.status == "disconnected":
            raise AccountDisconnected(str(self.id))
        self._trigger(
            MailAccountUpdated, now, tenant_id=self.tenant_id, changes=changes, reason=reason
        )

    def auth_failed(self, *, error_kind: str, now: datetime) -> bool:
        if self.status != "active":
            return False
        self._trigger(MailAccountAuthFailed, now, tenant_id=self.tenant_id, error_kind=error_kind)
        return True

    def reauth_required(self, *, error_kind: str, now: datetime) -> bool:
        """Answer whether the account was active (False: no event)."""
        if self.status != "active":
            return False
        self._trigger(
            MailAccountReauthRequired, now, tenant_id=self.tenant_id, error_kind=error_kind
        )
        return True

    def disconnect(self, *, now: datetime) -> bool:
        """Answer whether it was connected (False: already disconnected, no event)."""
        self._require_exists()
        if self.status == "disconnected":
            return False
        self._trigger(MailAccountDisconnected, now, tenant_id=self.tenant_id)
        return True

    def reconnect(self, *, now: datetime) -> bool:
        self._require_exists()
        if self.status == "active":
            return False
        self._trigger(MailAccountReconnected, now, tenant_id=self.tenant_id)
        return True

    def delete(self, *, now: datetime) -> None:
        self._require_exists()
        self._trigger(MailAccountDeleted, now, tenant_id=self.tenant_id)

    def _updated(self, changes: dict[str, Any]) -> None:
        if "trusted_authserv_id" in changes:
            self.trusted_authserv_id = changes["trusted_authserv_id"]
        if "imap" in changes:
            self.imap = dict(changes["imap"])
        if "folders" in changes:
            self.folders = changes["folders"]

    def mutate(self, event: DomainEvent) -> None:
        if isinstance(event, MailAccountConnected):
            self.tenant_id = event.tenant_id
            self.owner_user_id = event.owner_user_id
            self.scope = event.scope
            self.auth_method = "xoauth2" if event.auth_method == "xoauth2" else "password"
            self.trusted_authserv_id = event.trusted_authserv_id
            self.imap = dict(event.imap)
            self.address = event.address
            self.status = "active"
        elif isinstance(event, MailAccountUpdated):
            self._updated(event.changes)
        elif isinstance(event, MailAccountAuthFailed):
            self.status = "auth_error"
        elif isinstance(event, MailAccountReauthRequired):
            self.status = "reauth_required"
        elif isinstance(event, MailAccountDisconnected):
            self.status = "disconnected"
        elif isinstance(event, MailAccountReconnected):
            self.status = "active"
        elif isinstance(event, MailAccountDeleted):
            self.status = "deleted"


EVENTS: tuple[type[DomainEvent], ...] = (
    MailAccountConnected,
    MailAccountUpdated,
    MailAccountAuthFailed,
    MailAccountDisconnected,
    MailAccountReconnected,
    MailAccountDeleted,
    MailAccountReauthRequired,
)
