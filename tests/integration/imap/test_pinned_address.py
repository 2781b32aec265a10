"""A connection goes to the address the destination check approved, never to a second
resolution of the name: against a real Dovecot (plaintext) and a TLS server whose
certificate names the host, both reached through a name that resolves nowhere."""

from __future__ import annotations

import ssl
import subprocess
from datetime import date
from pathlib import Path

import pytest

from application.mail.ports import Credentials, ImapEndpoint, MailboxTransientError, OpenOptions
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.imap import ImapAdapterSettings, ImapMailProvider
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.hostile_imap import HostileImapServer, HostileMessage, Script

NOWHERE = "mail.tidings.invalid"  # .invalid never resolves: a lookup would fail the login
SINCE = date(2020, 1, 1)


def test_a_pinned_connection_never_resolves_the_name(
    dovecot: DovecotServer, user: DovecotUser, blob_store: FilesystemBlobStore
) -> None:
    provider = ImapMailProvider(blob_store=blob_store, settings=ImapAdapterSettings())
    endpoint = ImapEndpoint(NOWHERE, dovecot.port, "none", user.name, addresses=(dovecot.host,))
    with provider.open(endpoint, Credentials("password", user.password), OpenOptions("a1")) as s:
        s.verify()


def test_the_next_approved_address_is_tried_when_one_refuses(
    dovecot: DovecotServer, user: DovecotUser, blob_store: FilesystemBlobStore
) -> None:
    provider = ImapMailProvider(blob_store=blob_store, settings=ImapAdapterSettings())
    # Nothing listens on 127.0.0.2 at Dovecot's port: refused, then the next one answers.
    endpoint = ImapEndpoint(
        NOWHERE, dovecot.port, "none", user.name, addresses=("127.0.0.2", dovecot.host)
    )
    with provider.open(endpoint, Credentials("password", user.password), OpenOptions("a1")) as s:
        s.verify()


def tls_server_context(tmp_path: Path, name: str) -> tuple[ssl.SSLContext, Path]:
    cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}"),
            *("-addext", f"subjectAltName=DNS:{name}"),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


@pytest.mark.parametrize("certificate_name", [NOWHERE, "other.tidings.invalid"])
def test_tls_checks_the_certificate_against_the_name_not_the_address(
    tmp_path: Path, certificate_name: str
) -> None:
    server_side, cert = tls_server_context(tmp_path, certificate_name)
    message = HostileMessage(1)
    with HostileImapServer(Script([message]), lifetime=30, tls=server_side) as server:
        provider = ImapMailProvider(
            blob_store=FilesystemBlobStore(tmp_path / "blobs"),
            settings=ImapAdapterSettings(
                operation_timeout=5.0, ssl_context=ssl.create_default_context(cafile=str(cert))
            ),
        )
        endpoint = ImapEndpoint(NOWHERE, server.port, "tls", "user", addresses=(server.host,))
        credentials = Credentials("password", "pw")
        if certificate_name != NOWHERE:
            with pytest.raises(MailboxTransientError):
                provider.open(endpoint, credentials, OpenOptions("acct-t"))
            return
        with provider.open(endpoint, credentials, OpenOptions("acct-t")) as session:
            batch = session.fetch_since(None, backfill_since=SINCE, limit=10)
    assert [m.raw for m in batch.messages] == [message.body]
