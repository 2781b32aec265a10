"""Login paths and error classification against a real Dovecot."""

from __future__ import annotations

import io
import logging
from datetime import date

import pytest

from application.mail.ports import (
    Credentials,
    ImapEndpoint,
    MailboxAuthError,
    MailboxThrottled,
    MailboxTransientError,
    MailboxUnreachable,
    OpenOptions,
)
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.devkit.processes import free_port
from infrastructure.imap import ImapAdapterSettings, ImapMailProvider
from infrastructure.imap.wire import imap_of
from tests.integration.imap.conftest import OpenSession
from tests.support.dovecot import DovecotServer, DovecotUser

QUICK = ImapAdapterSettings(connect_timeout=2, read_timeout=5)


def test_wrong_password_is_an_auth_error_and_leaks_nothing(
    user: DovecotUser, open_session: OpenSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(MailboxAuthError) as err:
        open_session(credentials=Credentials("password", "not-the-password"))
    assert "not-the-password" not in str(err.value)
    assert "not-the-password" not in caplog.text
    assert user.name not in caplog.text  # the login name is often an address
    assert "error_class=MailboxAuthError" in caplog.text and "account_id=acct-" in caplog.text


def test_unknown_user_is_an_auth_error(
    dovecot: DovecotServer, blob_store: FilesystemBlobStore
) -> None:
    provider = ImapMailProvider(blob_store=blob_store, settings=QUICK)
    endpoint = ImapEndpoint(dovecot.host, dovecot.port, "none", "nobody-here")
    with pytest.raises(MailboxAuthError):
        provider.open(endpoint, Credentials("password", "x"), OpenOptions("a1"))


def test_closed_port_is_unreachable(blob_store: FilesystemBlobStore) -> None:
    provider = ImapMailProvider(blob_store=blob_store, settings=QUICK)
    endpoint = ImapEndpoint("127.0.0.1", free_port(), "none", "someone")
    with pytest.raises(MailboxUnreachable):
        provider.open(endpoint, Credentials("password", "x"), OpenOptions("a1"))


def test_unresolvable_host_is_unreachable(blob_store: FilesystemBlobStore) -> None:
    provider = ImapMailProvider(blob_store=blob_store, settings=QUICK)
    endpoint = ImapEndpoint("no-such-host.invalid", 993, "tls", "someone")
    with pytest.raises(MailboxUnreachable):
        provider.open(endpoint, Credentials("password", "x"), OpenOptions("a1"))


def test_starttls_is_required_when_asked_for(
    dovecot: DovecotServer, user: DovecotUser, blob_store: FilesystemBlobStore
) -> None:
    provider = ImapMailProvider(blob_store=blob_store, settings=QUICK)
    endpoint = ImapEndpoint(dovecot.host, dovecot.port, "starttls", user.name)
    with pytest.raises(MailboxUnreachable):  # ssl = no: never fall back to cleartext
        provider.open(endpoint, Credentials("password", user.password), OpenOptions("a1"))


def test_tls_against_a_cleartext_port_fails_fast(
    dovecot: DovecotServer, user: DovecotUser, blob_store: FilesystemBlobStore
) -> None:
    provider = ImapMailProvider(blob_store=blob_store, settings=QUICK)
    endpoint = ImapEndpoint(dovecot.host, dovecot.port, "tls", user.name)
    with pytest.raises(MailboxTransientError):
        provider.open(endpoint, Credentials("password", user.password), OpenOptions("a1"))


class StaticTokens:
    def __init__(self, token: str) -> None:
        self.token = token
        self.asked: list[str] = []

    def get_access_token(self, account_id: str) -> str:
        self.asked.append(account_id)
        return self.token


def test_xoauth2_uses_the_token_provider(
    user: DovecotUser, open_session: OpenSession, account_id: str
) -> None:
    # This Dovecot checks an XOAUTH2 token against the passwd-file password.
    tokens = StaticTokens(user.password)
    session = open_session(credentials=Credentials("xoauth2", "unused"), token_provider=tokens)
    session.verify()
    assert tokens.asked == [account_id]
    with pytest.raises(MailboxAuthError):
        open_session(
            credentials=Credentials("xoauth2", "unused"), token_provider=StaticTokens("expired")
        )


def test_too_many_connections_is_throttling(blob_store: FilesystemBlobStore) -> None:
    with DovecotServer(extra_config="mail_max_userip_connections = 1\n") as server:
        user = server.add_user("busy", "pw")
        provider = ImapMailProvider(blob_store=blob_store, settings=QUICK)
        endpoint = ImapEndpoint(server.host, server.port, "none", user.name)
        with provider.open(endpoint, Credentials("password", "pw"), OpenOptions("a1")) as first:
            first.verify()
            with pytest.raises(MailboxThrottled):
                second = provider.open(endpoint, Credentials("password", "pw"), OpenOptions("a1"))
                second.fetch_since(None, backfill_since=date.today(), limit=1)


def test_an_open_session_keeps_none_of_its_start_up_state(open_session: OpenSession) -> None:
    """A worker holds thousands of sessions: after login none keeps imaplib's buffered
    reader, the greeting or the debug log of its first lines, and equal capability lists
    are one object for all of them."""
    first, second = open_session(), open_session()
    imap = imap_of(first._conn.client)
    assert not isinstance(imap.file, io.BufferedIOBase)
    assert imap.welcome == b""
    assert not getattr(imap, "_cmd_log", {})
    assert "IDLE" in first.capabilities
    assert first.capabilities is second.capabilities
    assert imap.capabilities is imap_of(second._conn.client).capabilities
    assert first.list_folders()  # the session works as before
