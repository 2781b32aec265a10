"""OAuth2 fixtures: the tests' token server and a private Dovecot whose ``oauth2`` passdb
validates access tokens through that server's introspection endpoint."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from application import User
from application.app import App
from tests.integration.mail.conftest import (
    MASTER_KEY,
    MailApp,
    MakeMailApp,
    mail,  # noqa: F401
    make_mail_app,  # noqa: F401
)
from tests.integration.mail.helpers import connect_payload
from tests.support.dovecot import DovecotServer, DovecotUser, dovecot_available
from tests.support.oauth_server import OAuthServer
from tests.support.results import ok

__all__ = ["MASTER_KEY", "MailApp", "MakeMailApp"]


@pytest.fixture
def oauth_server() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@pytest.fixture
def oauth_dovecot(
    oauth_server: OAuthServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DovecotServer]:
    if not dovecot_available():
        pytest.fail("dovecot is not installed", pytrace=False)
    directory = tmp_path_factory.mktemp("oauth2")
    for parent in (directory, *directory.parents):  # Dovecot's auth process reads the file
        if parent == Path("/") or parent.stat().st_mode & 0o005 == 0o005:
            break
        parent.chmod(parent.stat().st_mode | 0o005)
    with DovecotServer(extra_config=oauth_server.dovecot_config(directory)) as server:
        yield server


@pytest.fixture
def oauth_box(oauth_dovecot: DovecotServer) -> DovecotUser:
    return oauth_dovecot.add_user("o" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))


ConnectOAuth = Callable[..., str]


def oauth_payload(
    dovecot: DovecotServer, box: DovecotUser, server: OAuthServer, refresh_token: str, **extra: Any
) -> dict[str, Any]:
    payload = connect_payload(dovecot, box, authMethod="xoauth2")
    del payload["secret"]
    payload["oauth"] = {
        "provider": "custom",
        "refreshToken": refresh_token,
        "tokenUrl": server.token_url,
        "clientId": "tidings-tests",
        **extra,
    }
    return payload


@pytest.fixture
def connect_oauth(oauth_dovecot: DovecotServer, oauth_server: OAuthServer) -> ConnectOAuth:
    def connect(app: App, user: User, box: DovecotUser, **payload: Any) -> str:
        body = oauth_payload(oauth_dovecot, box, oauth_server, oauth_server.grant(box.name))
        body.update(payload)
        data = ok(app.write("connect-mail-account", body, user))
        account_id: str = data["accountId"]
        return account_id

    return connect
