"""IMAP adapter of the mail provider port (``application.mail.ports``), on imapclient."""

from infrastructure.imap.provider import ImapMailProvider
from infrastructure.imap.session import ImapMailboxSession
from infrastructure.imap.settings import ImapAdapterSettings

__all__ = ["ImapAdapterSettings", "ImapMailProvider", "ImapMailboxSession"]
