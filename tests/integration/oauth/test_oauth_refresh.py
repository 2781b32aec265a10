"""Refreshing OAuth2 access tokens against the tests' token server and Dovecot's
``oauth2`` passdb: expiry, single-flight under threads and processes, rotation sealed
before use, ``invalid_grant`` -> ``reauth_required`` and back, transient failures."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from application import User
from application.destinations import IpAddress
from application.mail.oauth import OAuthGrant, TokenServerError
from application.streams import load
from domain.mail_account import MailAccount
from infrastructure.net_policy import ResolvingDestinationPolicy
from infrastructure.oauth.token_client import HttpTokenClient
from tests.e2e.process import ROOT
from tests.integration.mail.helpers import accounts, count_events, messages, raw_mail
from tests.integration.oauth.conftest import (
    MASTER_KEY,
    ConnectOAuth,
    MailApp,
    MakeMailApp,
    oauth_payload,
)
from tests.integration.redis.conftest import REDIS_URL
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.oauth_server import OAuthServer
from tests.support.results import ok

INGESTED = "tidings.mail.MessageIngested"


def grant_of(mail: MailApp, account_id: str) -> OAuthGrant:
    stored = mail.app.ctx.mail.secrets.get(account_id)
    assert stored is not None
    grant = OAuthGrant.loads(stored)
    assert grant is not None
    return grant


def status(mail: MailApp, admin: User, account_id: str) -> str:
    value: str = accounts(mail.app, admin)[account_id]["status"]
    return value


def test_an_expired_token_is_refreshed_before_the_next_login(
    make_mail_app: MakeMailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    oauth_server.expires_in = 2
    mail = make_mail_app(oauth_refresh_margin=0.5)
    account_id = connect_oauth(mail.app, admin, oauth_box)
    oauth_dovecot.deliver(oauth_box, [raw_mail(1)])
    assert mail.outcome(account_id, mail.poll()).ingested == 1
    first = grant_of(mail, account_id).access_token
    assert oauth_server.refresh_count == 1
    assert mail.outcome(account_id, mail.poll()).error_kind is None  # still valid: reused
    assert oauth_server.refresh_count == 1
    time.sleep(2.1)  # expired at the token server: the old token no longer logs in
    oauth_dovecot.deliver(oauth_box, [raw_mail(2)])
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (1, None)
    assert oauth_server.refresh_count == 2
    assert grant_of(mail, account_id).access_token != first
    assert status(mail, admin, account_id) == "active"


def _race_threads(mail: MailApp, account_id: str, count: int) -> list[str]:
    account = load(mail.app.ctx.store, MailAccount, UUID(account_id))
    barrier = threading.Barrier(count)
    results: list[str] = []
    lock = threading.Lock()

    def login() -> None:
        barrier.wait()
        try:
            with mail.syncer.open_session(account) as session:
                session.select_inbox()
            outcome = "ok"
        except Exception as error:
            outcome = type(error).__name__
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=login) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.mark.parametrize("with_redis", [False, True], ids=["in_process", "redis"])
def test_twenty_threads_racing_make_one_refresh(
    make_mail_app: MakeMailApp,
    admin: User,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
    with_redis: bool,
) -> None:
    mail = make_mail_app(redis_url=REDIS_URL) if with_redis else make_mail_app()
    account_id = connect_oauth(mail.app, admin, oauth_box)  # no access token yet
    oauth_server.delay = 0.3  # a wide window for a second refresher to slip in
    results = _race_threads(mail, account_id, 20)
    assert results == ["ok"] * 20
    assert oauth_server.refresh_count == 1


def test_three_processes_racing_make_one_refresh(
    make_mail_app: MakeMailApp,
    database_url: str,
    tmp_path: Path,
    admin: User,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    mail = make_mail_app(redis_url=REDIS_URL)
    account_id = connect_oauth(mail.app, admin, oauth_box)
    oauth_server.delay = 0.3
    args = [database_url, REDIS_URL, str(tmp_path / "blobs"), MASTER_KEY, account_id, "7"]
    ready = [tmp_path / f"ready-{n}" for n in range(3)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.oauth_race", *args, str(path)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path in ready
    ]
    # Every process has bootstrapped (or died, and fails below): all start at one moment.
    deadline = time.monotonic() + 120
    while not all(p.exists() or proc.poll() is not None for p, proc in zip(ready, procs)):
        assert time.monotonic() < deadline, "the racing processes did not bootstrap in 120 s"
        time.sleep(0.05)
    start_at = time.time() + 0.5
    for proc in procs:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # a dead process fails below
            proc.stdin.write(f"{start_at}\n")
            proc.stdin.flush()
    outputs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
        assert out.strip().startswith("ok=7 failed=0"), (out, err[-2000:])
    assert oauth_server.refresh_count == 1, oauth_server.refresh_count
    print(f"oauth.race processes=3 threads=21 refresh_requests={oauth_server.refresh_count}")


def test_a_rotated_refresh_token_is_stored_sealed_before_the_new_access_token_is_used(
    mail: MailApp,
    admin: User,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    account_id = connect_oauth(mail.app, admin, oauth_box)
    original = grant_of(mail, account_id).refresh_token
    seen: list[tuple[str, str | None]] = []

    def at_first_use(token: str) -> None:  # Dovecot is checking the new access token now
        [live] = oauth_server.live_refresh_tokens(oauth_box.name)
        seen.append((live, grant_of(mail, account_id).refresh_token))

    oauth_server.on_introspect = at_first_use
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    assert seen, "the login never reached the introspection endpoint"
    live, stored = seen[0]
    assert live != original  # the server rotated it
    assert stored == live  # and the store held the rotated one before its first use
    raw = _sealed_row(mail, account_id)
    assert live not in raw and original not in raw
    assert not any(t in raw for t in oauth_server.issued_access_tokens())


def _sealed_row(mail: MailApp, account_id: str) -> str:
    db: Any = mail.app.ctx.mail.secrets.db  # type: ignore[attr-defined]
    with db.reading() as cur:
        cur.execute("SELECT sealed FROM mail_secrets WHERE account_id = ?", (account_id,))
        row = cur.fetchone()
    return str(row[0])


def test_a_refused_grant_needs_reauth_keeping_everything_and_reconnect_resumes(
    mail: MailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    oauth_server.expires_in = 1
    account_id = connect_oauth(mail.app, admin, oauth_box)
    oauth_dovecot.deliver(oauth_box, [raw_mail(i) for i in range(3)])
    assert mail.outcome(account_id, mail.poll()).ingested == 3
    before = sorted(m["messageId"] for m in messages(mail.app, admin, accountId=account_id))
    cursor = mail.app.ctx.mail.state.cursor(account_id)
    time.sleep(1.1)
    oauth_server.revoke()  # the user withdrew consent
    outcome = mail.outcome(account_id, mail.poll())
    assert outcome.error_kind == "auth"
    assert status(mail, admin, account_id) == "reauth_required"
    assert sorted(m["messageId"] for m in messages(mail.app, admin, accountId=account_id)) == (
        before
    )
    assert mail.app.ctx.mail.state.cursor(account_id) == cursor
    feed = ok(mail.app.query("read-feed", {}, admin))["items"]
    [item] = [i for i in feed if i["type"] == "mail_account.reauth_required"]
    assert account_id in json.dumps(item) and item["data"]["errorKind"] == "MailboxReauthRequired"
    requests = oauth_server.refresh_count
    assert account_id not in {o.account_id for o in mail.poll()}  # not polled until reconnected
    assert oauth_server.refresh_count == requests

    oauth_dovecot.deliver(oauth_box, [raw_mail(10)])
    fresh = oauth_server.grant(oauth_box.name)
    body = {"accountId": account_id, "refreshToken": fresh}
    assert ok(mail.app.write("reconnect-mail-account", body, admin))["alreadyActive"] is False
    assert status(mail, admin, account_id) == "active"
    resumed = mail.outcome(account_id, mail.poll())
    assert (resumed.ingested, resumed.duplicates, resumed.error_kind) == (1, 0, None)
    after = sorted(m["messageId"] for m in messages(mail.app, admin, accountId=account_id))
    assert set(before) < set(after) and len(after) == 4
    assert count_events(mail.app, INGESTED) == 4  # nothing ingested twice


def test_a_new_refresh_token_by_update(
    mail: MailApp,
    admin: User,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    account_id = connect_oauth(mail.app, admin, oauth_box)
    fresh = oauth_server.grant(oauth_box.name)
    ok(
        mail.app.write(
            "update-mail-account", {"accountId": account_id, "refreshToken": fresh}, admin
        )
    )
    assert grant_of(mail, account_id).refresh_token == fresh
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    assert oauth_server.refresh_requests == [fresh]


@pytest.mark.parametrize("failure", ["503", "hang"])
def test_token_server_failures_are_transient_and_the_account_stays_active(
    make_mail_app: MakeMailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
    failure: str,
) -> None:
    mail = make_mail_app(oauth_token_timeout=1.0)
    account_id = connect_oauth(mail.app, admin, oauth_box)
    if failure == "503":
        oauth_server.fail_with = 503
    else:
        oauth_server.hang.set()
    started = time.monotonic()
    outcome = mail.outcome(account_id, mail.poll())
    # A hung token request ends at its deadline: a timeout, transient like a 503.
    assert outcome.error_kind == ("transient" if failure == "503" else "timeout")
    assert time.monotonic() - started < 10  # the token request's deadline held
    assert status(mail, admin, account_id) == "active"
    oauth_server.fail_with = None
    oauth_server.hang.clear()
    oauth_dovecot.deliver(oauth_box, [raw_mail(1)])
    recovered = mail.outcome(account_id, mail.poll())
    assert (recovered.ingested, recovered.error_kind) == (1, None)


def test_a_hostile_token_answer_is_transient(
    mail: MailApp,
    admin: User,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    account_id = connect_oauth(mail.app, admin, oauth_box)
    for answer in (
        b"{" * 5_000_000,  # past the size bound
        b'{"access_token": "a\\r\\nb", "expires_in": 60}',  # would inject into SASL
        b'{"access_token": "abc", "expires_in": -5}',
        b"[1, 2]",
    ):
        oauth_server.raw_answer = answer
        assert mail.outcome(account_id, mail.poll()).error_kind == "transient"
    assert status(mail, admin, account_id) == "active"
    assert grant_of(mail, account_id).access_token is None  # nothing of it was stored


def test_connect_refuses_a_bad_oauth_payload(
    mail: MailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
) -> None:
    base = oauth_payload(oauth_dovecot, oauth_box, oauth_server, "rt-x")
    cases: list[dict[str, Any]] = [
        {**base, "oauth": {**base["oauth"], "tokenUrl": None}},  # custom needs one
        {**base, "oauth": {**base["oauth"], "tokenUrl": "ftp://127.0.0.1/token"}},
        {**base, "oauth": {**base["oauth"], "provider": "google"}},  # tokenUrl only for custom
        {**base, "oauth": {**base["oauth"], "refreshToken": "a\r\nb"}},
        {**base, "authMethod": "password"},
        {**base, "secret": "also"},
        {**base, "oauth": {**base["oauth"], "scopes": ["has space"]}},
    ]
    for payload in cases:
        result = mail.app.write("connect-mail-account", payload, admin)
        assert result.error is not None and result.error.status == 400, payload
    assert mail.app.write("connect-mail-account", base, admin).is_success  # the base is valid


def test_the_token_url_obeys_the_private_host_rule(
    make_mail_app: MakeMailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
) -> None:
    mail = make_mail_app(allow_private_hosts=False)
    payload = oauth_payload(oauth_dovecot, oauth_box, oauth_server, "rt-x")
    # A public IP literal (no DNS; nothing connects without verify): the token URL on
    # loopback is what is refused.
    payload["imap"] = {**payload["imap"], "host": "93.184.216.34"}
    result = mail.app.write("connect-mail-account", payload, admin)
    assert result.error is not None and result.error.code == "host_not_allowed"
    # And at refresh time, whatever was stored: no request leaves.
    client = HttpTokenClient(ResolvingDestinationPolicy(allow_private=False), allow_http=True)
    with pytest.raises(TokenServerError):
        client.refresh(
            oauth_server.token_url,
            refresh_token=oauth_server.grant(oauth_box.name),
            client_id=None,
            client_secret=None,
            scopes=(),
        )
    assert oauth_server.refresh_count == 0


class ApprovesLoopback:
    """The destination policy's answer for a name: the loopback token server's address."""

    def check(self, host: str, port: int) -> None:
        self.approved(host, port)

    def approved(self, host: str, port: int) -> tuple[IpAddress, ...]:
        return (ipaddress.ip_address("127.0.0.1"),)


def test_a_token_request_goes_to_the_approved_address_under_its_name(
    oauth_server: OAuthServer, oauth_box: DovecotUser
) -> None:
    # The name resolves nowhere: the request reaches the server only through the
    # address the policy approved, and the server is asked for the name.
    client = HttpTokenClient(ApprovesLoopback(), allow_http=True)
    url = f"http://login.tidings.invalid:{oauth_server.port}/token"
    answer = client.refresh(
        url,
        refresh_token=oauth_server.grant(oauth_box.name),
        client_id=None,
        client_secret=None,
        scopes=(),
    )
    assert answer.access_token and oauth_server.refresh_count == 1
    assert oauth_server.hosts == [f"login.tidings.invalid:{oauth_server.port}"]


def test_a_token_the_server_refuses_early_is_refreshed_once(
    mail: MailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    account_id = connect_oauth(mail.app, admin, oauth_box)
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    oauth_server.expire_all()  # revoked at the server; our copy still looks valid
    oauth_dovecot.deliver(oauth_box, [raw_mail(1)])
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (1, None)
    assert oauth_server.refresh_count == 2
    assert status(mail, admin, account_id) == "active"
