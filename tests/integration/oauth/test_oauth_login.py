"""XOAUTH2 / OAUTHBEARER logins against Dovecot's ``oauth2`` passdb, with the tests'
token server issuing, expiring, rotating and refusing tokens."""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path

import pytest

from application import User
from application.mail.oauth import OAuthGrant
from tests.integration.mail.helpers import messages, raw_mail
from tests.integration.oauth.conftest import ConnectOAuth, MailApp, oauth_payload
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.oauth_server import OAuthServer
from tests.support.results import ok


def grant_of(mail: MailApp, account_id: str) -> OAuthGrant:
    stored = mail.app.ctx.mail.secrets.get(account_id)
    assert stored is not None
    grant = OAuthGrant.loads(stored)
    assert grant is not None
    return grant


def test_a_grant_logs_in_by_oauth_and_ingests(
    mail: MailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    oauth_dovecot.deliver(oauth_box, [raw_mail(1), raw_mail(2)])
    account_id = connect_oauth(mail.app, admin, oauth_box, verify=True)
    assert oauth_server.refresh_count == 1  # verify refreshed once; the poll reuses it
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (2, None)
    assert oauth_server.refresh_count == 1
    assert oauth_server.introspections >= 2  # the server checked each login's token
    assert len(messages(mail.app, admin, accountId=account_id)) == 2


@pytest.mark.parametrize("mechanism", ["xoauth2", "oauthbearer"])
def test_each_sasl_mechanism_alone_logs_in(
    mail: MailApp,
    admin: User,
    oauth_server: OAuthServer,
    tmp_path: Path,
    mechanism: str,
) -> None:
    extra = oauth_server.dovecot_config(tmp_path) + f"auth_mechanisms = plain {mechanism}\n"
    with DovecotServer(extra_config=extra) as server:
        box = server.add_user("o" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))
        server.deliver(box, [raw_mail(1)])
        payload = oauth_payload(server, box, oauth_server, oauth_server.grant(box.name))
        account_id = ok(mail.app.write("connect-mail-account", {**payload, "verify": True}, admin))[
            "accountId"
        ]
        outcome = mail.outcome(account_id, mail.poll())
        assert (outcome.ingested, outcome.error_kind) == (1, None)
