"""What every handler and query is given (``Context``): the event store, the clock, the
read models, the policy knobs from settings and the mail feature's ports (``MailPorts``),
all wired by the composition root."""

from __future__ import annotations

from dataclasses import dataclass, field

from application.api_keys.ports import KeyUsage
from application.custom_fields.ports import CustomFieldsReadModel
from application.custom_fields.write_cache import WriteCache
from application.destinations import DestinationPolicy
from application.feed.ports import FeedReadModel
from application.mail.activity import UserActivity
from application.mail.content import ContentReader
from application.mail.deferred import DeferredBodies
from application.mail.flag_state import FlagStateStore
from application.mail.folder_state import FolderStateStore
from application.mail.outbound.ports import OutboxReadModel, UploadStore
from application.mail.ports import BlobStore, DownloadBudgets, MailProvider, TokenProvider
from application.mail.providers import ProviderTable
from application.mail.read_model import MailReadModel
from application.mail.state import MailboxStateStore
from application.ports import Clock, EventStore
from application.privacy import PiiCipher, SecretStore
from application.signals import SignalBus
from application.users import TENANT_ADMIN, TENANT_MEMBER
from application.webhooks.ports import WebhookStore
from domain.mail_retention import KEPT_FOR_EVER, MailRetention


@dataclass(frozen=True)
class MailPorts:
    """The adapters the mail use cases and the workers' ingestion reach through ``ctx.mail``."""

    cipher: PiiCipher
    secrets: SecretStore
    provider: MailProvider
    blobs: BlobStore
    state: MailboxStateStore
    deferred: DeferredBodies  # bodies still to fetch (metadata first, past the budget)
    read_model: MailReadModel
    signals: SignalBus
    destinations: DestinationPolicy
    activity: UserActivity
    content: ContentReader | None = None  # None: get-message gives no text/html/attachments
    budgets: DownloadBudgets | None = None  # None: no account's bodies are ever deferred
    flags: FlagStateStore | None = None  # None: flags are not mirrored
    folders: FolderStateStore | None = None  # None: only INBOX is synced
    outbox: OutboxReadModel | None = None  # None: nothing can be sent
    uploads: UploadStore | None = None  # None: attachments only inline
    providers: ProviderTable = field(default_factory=ProviderTable)  # send limits, Sent copies
    token_provider: TokenProvider | None = None  # OAuth2 access tokens (IMAP's and SMTP's)
    smtp_secrets: SecretStore | None = None  # accounts' own SMTP secrets (``smtpSecret``)


@dataclass(frozen=True)
class Policy:
    field_definition_limit_per_tenant: int | None = None
    field_definition_write_roles: frozenset[str] = frozenset({TENANT_ADMIN})
    value_write_roles: frozenset[str] = frozenset({TENANT_ADMIN, TENANT_MEMBER})
    max_text_bytes: int = 64 * 1024
    max_attachment_result_bytes: int = 25 * 1024 * 1024  # get-attachment's base64 answer
    verify_timeout: float = 20.0  # seconds for the whole of a connect's verify
    api_keys_per_tenant: int = 100
    webhook_limit_per_tenant: int = 20  # webhooks a tenant may have
    # The operator's mail retention, for tenants without their own.
    mail_retention_default: MailRetention = KEPT_FOR_EVER
    max_send_bytes: int = 25 * 1024 * 1024  # the whole composed message (``max_send_mb``)
    send_roles: frozenset[str] = frozenset({TENANT_ADMIN, TENANT_MEMBER})  # shared accounts


@dataclass(frozen=True)
class Context:
    store: EventStore
    clock: Clock
    custom_fields: CustomFieldsReadModel
    policy: Policy = field(default_factory=Policy)
    mail_ports: MailPorts | None = None
    feed_model: FeedReadModel | None = None
    keys: PiiCipher | None = None  # None: the mail ports' key ring
    webhook_store: WebhookStore | None = None
    key_usage: KeyUsage | None = None  # None: keys' last use is not recorded
    # Definitions and entities that set/clear read, per process (checked at commit).
    write_cache: WriteCache = field(default_factory=WriteCache)

    @property
    def cipher(self) -> PiiCipher:
        """Seals tenant data (custom-field values); the same key ring as mail's."""
        return self.keys if self.keys is not None else self.mail.cipher

    @property
    def mail(self) -> MailPorts:
        if self.mail_ports is None:
            raise RuntimeError("mail ports are not wired (composition root bug)")
        return self.mail_ports

    @property
    def feed(self) -> FeedReadModel:
        if self.feed_model is None:
            raise RuntimeError("the feed is not wired (composition root bug)")
        return self.feed_model

    @property
    def webhooks(self) -> WebhookStore:
        if self.webhook_store is None:
            raise RuntimeError("the webhook store is not wired (composition root bug)")
        return self.webhook_store
