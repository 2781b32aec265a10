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

Synced folders (``synced_folders``, key -> name and role) change only by
``record_folders``, which compares with what the stream holds: ``MailFolderListed`` (new,
or a new role), ``MailFolderRenamed`` (same key, new name), ``MailFolderGone``; a listing
equal to the known folders records nothing, so racing workers and restarts stay exactly
once.

Disconnecting twice is not an error (the second is a no-op); reconnecting an active
account is a no-op. Personal data (address, display name, username) reaches this
module already encrypted: events hold ciphertext tokens only, never the secret.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    # "all" or a list of names: the ``folders`` setting, checked by the application) /
    # smtp (host, port, security; username as ciphertext: where the account sends)
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


@dataclass(frozen=True, kw_only=True)
class MailFolderListed(DomainEvent):
    """A synced folder seen for the first time, or its role changed (names and roles are
    the server's text, bounded by the listing: at most 1,024 characters, no control
    characters)."""

    TOPIC: ClassVar[str] = "tidings.mail.MailFolderListed"

    tenant_id: str
    folder_key: str
    name: str
    role: str | None


@dataclass(frozen=True, kw_only=True)
class MailFolderRenamed(DomainEvent):
    """A synced folder under a new name, the same folder (its MAILBOXID)."""

    TOPIC: ClassVar[str] = "tidings.mail.MailFolderRenamed"

    tenant_id: str
    folder_key: str
    name: str
    old_name: str


@dataclass(frozen=True, kw_only=True)
class MailFolderGone(DomainEvent):
    """A folder no longer synced: deleted on the server, or no longer chosen."""

    TOPIC: ClassVar[str] = "tidings.mail.MailFolderGone"

    tenant_id: str
    folder_key: str
    name: str


FolderEvent = MailFolderListed | MailFolderRenamed | MailFolderGone


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
        self.smtp: dict[str, Any] = {}  # empty: the account cannot send
        self.address = ""  # ciphertext: whose From makes a message outbound
        self.folders: str | list[str] = "special"  # which folders are synced
        self.synced_folders: dict[str, tuple[str, str | None]] = {}  # key -> (name, role)
        # A renamed folder's old names -> its name now: messages' streams keep the name
        # they were placed under, and the read models rename them (``renamed_name``).
        self.folder_renames: dict[str, str] = {}

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

    def record_folders(
        self, listed: Mapping[str, tuple[str, str | None]], *, now: datetime
    ) -> bool:
        """Make the synced folders ``listed`` (key -> (name, role)): an event for each
        difference, none when equal (racing workers that listed the same compare equal
        after a reload). Answers whether anything was recorded."""
        self._require_exists()
        known, tenant = self.synced_folders, self.tenant_id
        changed = False
        for key in sorted(set(known) - set(listed)):
            self._trigger(MailFolderGone, now, tenant_id=tenant, folder_key=key, name=known[key][0])
            changed = True
        for key, (name, role) in sorted(listed.items()):
            old = known.get(key)
            if old is not None and old[0] != name:
                self._trigger(
                    MailFolderRenamed,
                    now,
                    tenant_id=tenant,
                    folder_key=key,
                    name=name,
                    old_name=old[0],
                )
                changed = True
            if old is None or old[1] != role:
                self._trigger(
                    MailFolderListed, now, tenant_id=tenant, folder_key=key, name=name, role=role
                )
                changed = True
        return changed

    def _folder_changed(self, event: FolderEvent) -> None:
        if isinstance(event, MailFolderGone):
            self.synced_folders.pop(event.folder_key, None)
        elif isinstance(event, MailFolderRenamed):
            role = self.synced_folders.get(event.folder_key, (event.name, None))[1]
            self.synced_folders[event.folder_key] = (event.name, role)
            renames = self.folder_renames
            for old, new in list(renames.items()):
                if new == event.old_name:
                    renames[old] = event.name
            renames[event.old_name] = event.name
            renames.pop(event.name, None)  # a name in use is itself
        else:
            self.synced_folders[event.folder_key] = (event.name, event.role)
            self.folder_renames.pop(event.name, None)

    def renamed_name(self, name: str) -> str:
        """``name`` as its folder is called now (itself unless that folder was renamed)."""
        return self.folder_renames.get(name, name)

    def _updated(self, changes: dict[str, Any]) -> None:
        if "trusted_authserv_id" in changes:
            self.trusted_authserv_id = changes["trusted_authserv_id"]
        if "imap" in changes:
            self.imap = dict(changes["imap"])
        if "smtp" in changes:
            self.smtp = dict(changes["smtp"] or {})
        if "folders" in changes:
            self.folders = changes["folders"]

    def mutate(self, event: DomainEvent) -> None:
        if isinstance(event, MailFolderListed | MailFolderRenamed | MailFolderGone):
            self._folder_changed(event)
        elif isinstance(event, MailAccountConnected):
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
    MailFolderListed,
    MailFolderRenamed,
    MailFolderGone,
)
