"""A private Dovecot for the whole session; a fresh random user (own uid, own maildir) per test."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from application.mail.ports import Credentials, ImapEndpoint, OpenOptions, TokenProvider
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.imap import ImapAdapterSettings, ImapMailboxSession, ImapMailProvider
from tests.support.dovecot import DovecotServer, DovecotUser, dovecot_available

OpenSession = Callable[..., ImapMailboxSession]


@pytest.fixture(scope="session")
def dovecot() -> Iterator[DovecotServer]:
    if not dovecot_available():
        pytest.fail("dovecot is not installed: apt-get install dovecot-imapd (.ci/run does)")
    with DovecotServer() as server:
        yield server


@pytest.fixture
def user(dovecot: DovecotServer) -> DovecotUser:
    return dovecot.add_user("u" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))


@pytest.fixture
def account_id() -> str:
    return "acct-" + uuid.uuid4().hex[:8]


@pytest.fixture
def blob_store(tmp_path: Path) -> FilesystemBlobStore:
    return FilesystemBlobStore(tmp_path / "blobs")


@pytest.fixture
def endpoint(dovecot: DovecotServer, user: DovecotUser) -> ImapEndpoint:
    return ImapEndpoint(dovecot.host, dovecot.port, "none", user.name)


@pytest.fixture
def open_session(
    endpoint: ImapEndpoint,
    user: DovecotUser,
    blob_store: FilesystemBlobStore,
    account_id: str,
) -> Iterator[OpenSession]:
    """Open sessions on the test user; all are closed at teardown."""
    sessions: list[ImapMailboxSession] = []

    def open_(
        settings: ImapAdapterSettings | None = None,
        credentials: Credentials | None = None,
        token_provider: TokenProvider | None = None,
    ) -> ImapMailboxSession:
        provider = ImapMailProvider(
            blob_store=blob_store,
            token_provider=token_provider,
            settings=settings or ImapAdapterSettings(connect_timeout=5, read_timeout=30),
        )
        session = provider.open(
            endpoint,
            credentials or Credentials("password", user.password),
            OpenOptions(account_id),
        )
        sessions.append(session)
        return session

    yield open_
    for session in sessions:
        session.close()
