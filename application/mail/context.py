"""The ports the mail use cases work with (wired by the composition root)."""

from __future__ import annotations

from dataclasses import dataclass

from application.mail.activity import UserActivity
from application.mail.ports import BlobStore, MailProvider
from application.mail.read_model import MailReadModel
from application.mail.state import MailboxStateStore
from application.privacy import PiiCipher, SecretStore
from application.signals import SignalBus


@dataclass(frozen=True)
class MailPorts:
    cipher: PiiCipher
    secrets: SecretStore
    provider: MailProvider
    blobs: BlobStore
    state: MailboxStateStore
    read_model: MailReadModel
    signals: SignalBus
    activity: UserActivity
