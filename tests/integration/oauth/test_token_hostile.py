"""The second audit's OAuth findings, against the tests' token server on both backends:
a token endpoint that drips its headers is cut at the request's wall-clock deadline
and recorded as a ``timeout``; a deeply nested token answer is a transient failure,
never a crash, and leaves no grant behind; the operator's client secret goes only to
the token URL configured with it, while a tenant's own client goes with its grant."""

from __future__ import annotations

import time
from typing import Any

from application import User
from application.users import TENANT_MEMBER
from infrastructure.crypto.secret_store import SECRETS_TABLE
from tests.integration.mail.helpers import accounts
from tests.integration.oauth.conftest import ConnectOAuth, MailApp, MakeMailApp, oauth_payload
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.oauth_server import OAuthServer
from tests.support.results import failed, ok

NESTED = b"[" * 32_768 + b"]" * 32_768  # 64 KB: json.loads would raise RecursionError


def stored_rows(mail: MailApp) -> list[Any]:
    """The secret store's rows as stored (sealed)."""
    store: Any = mail.app.ctx.mail.secrets
    with store.db.reading() as cur:
        cur.execute(f"SELECT * FROM {SECRETS_TABLE}")
        return list(cur.fetchall())


def test_a_token_endpoint_dripping_its_headers_is_cut_at_the_deadline_and_recorded(
    make_mail_app: MakeMailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    mail = make_mail_app(oauth_token_timeout=2.0)
    account_id = connect_oauth(mail.app, admin, oauth_box)  # no access token yet
    oauth_server.drip = 0.2  # a byte every 0.2 s: each read succeeds, the whole never ends
    started = time.monotonic()
    outcome = mail.outcome(account_id, mail.poll())
    took = time.monotonic() - started
    assert outcome.error_kind == "timeout"
    assert took < 6, took  # 2 s deadline, not "for as long as the drip lasts"
    health = accounts(mail.app, admin)[account_id]["health"]
    assert health["lastErrorKind"] == "timeout"
    # The account's refresh lock was given back: the next pass refreshes and logs in.
    oauth_server.drip = None
    assert mail.outcome(account_id, mail.poll()).error_kind is None


def test_a_deeply_nested_token_answer_is_transient_and_leaves_no_grant(
    mail: MailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    account_id = connect_oauth(mail.app, admin, oauth_box)
    oauth_server.raw_answer = NESTED
    outcome = mail.outcome(account_id, mail.poll())
    assert outcome.error_kind == "transient"  # not a crash with no kind
    assert accounts(mail.app, admin)[account_id]["health"]["lastErrorKind"] == "transient"
    # At connect with verify: 422, and no sealed grant of an account that does not exist.
    before = len(stored_rows(mail))
    payload = oauth_payload(oauth_dovecot, oauth_box, oauth_server, "rt-nested")
    payload["verify"] = True
    failed(mail.app.write("connect-mail-account", payload, admin), "mailbox_unreachable", 422)
    assert len(stored_rows(mail)) == before


def _verify(mail: MailApp, user: User, payload: dict[str, Any]) -> None:
    mail.app.write("connect-mail-account", {**payload, "verify": True}, user)


def test_the_operators_custom_secret_goes_only_to_the_token_url_configured_with_it(
    make_mail_app: MakeMailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
) -> None:
    operator = {
        "oauth_custom_client_id": "operator-client",
        "oauth_custom_client_secret": "operator-secret-value",
    }
    member = User(id="m1", tenant_id=admin.tenant_id, roles=frozenset({TENANT_MEMBER}))
    payload = {**oauth_payload(oauth_dovecot, oauth_box, oauth_server, "rt-a"), "scope": "user"}
    # A tenant names a token URL (here the capture server): the secret never goes there.
    _verify(make_mail_app(**operator), member, payload)
    assert oauth_server.forms, "the token URL was not asked at all"
    assert all("client_secret" not in form for form in oauth_server.forms)
    # The URL the operator configured with it does get it.
    configured = make_mail_app(**operator, oauth_custom_token_url=oauth_server.token_url)
    _verify(configured, member, {**payload, "oauth": {**payload["oauth"], "refreshToken": "rt-b"}})
    assert oauth_server.forms[-1]["client_secret"] == "operator-secret-value"


def test_a_tenants_own_custom_client_is_sent_and_kept_sealed(
    mail: MailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
) -> None:
    payload = oauth_payload(
        oauth_dovecot,
        oauth_box,
        oauth_server,
        oauth_server.grant(oauth_box.name),
        clientSecret="tenant-own-secret",
    )
    account_id = ok(mail.app.write("connect-mail-account", {**payload, "verify": True}, admin))[
        "accountId"
    ]
    assert oauth_server.forms[-1]["client_secret"] == "tenant-own-secret"
    assert oauth_server.forms[-1]["client_id"] == "tidings-tests"
    stored = mail.app.ctx.mail.secrets.get(account_id)
    assert stored is not None and "tenant-own-secret" in stored  # sealed at rest, with it
    assert "tenant-own-secret" not in repr(stored_rows(mail))
