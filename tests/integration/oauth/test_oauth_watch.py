"""A running worker watches an OAuth2 account while its access tokens expire every few
seconds: each new login refreshes first, mail keeps arriving, the account stays active;
a revoked grant then makes the worker give the account up (``reauth_required``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from application import User
from infrastructure.bootstrap_workers import build_supervisor
from tests.integration.mail.helpers import accounts, messages, raw_mail
from tests.integration.oauth.conftest import ConnectOAuth, MakeMailApp
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.oauth_server import OAuthServer
from tests.support.results import ok
from workers.news import Wake

DEADLINE = 60.0


def wait_until(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {DEADLINE} s")
        time.sleep(0.2)


def test_tokens_expire_and_refresh_during_a_watch(
    make_mail_app: MakeMailApp,
    admin: User,
    oauth_dovecot: DovecotServer,
    oauth_box: DovecotUser,
    oauth_server: OAuthServer,
    connect_oauth: ConnectOAuth,
) -> None:
    oauth_server.expires_in = 3
    mail = make_mail_app(watch_lease_ttl=6.0, poll_interval=1.0, oauth_refresh_margin=1.0)
    app = mail.app
    account_id = connect_oauth(app, admin, oauth_box)
    app.projections.catch_up()
    supervisor = build_supervisor(app, mail.settings, "w-oauth")
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop,), name="supervisor")
    thread.start()
    try:

        def count() -> int:
            return len(messages(app, admin, accountId=account_id))

        ok(app.write("user-active", {}, admin))
        wait_until("a watch", lambda: supervisor.owner.holds(account_id))
        for n in range(3):  # across several token lifetimes
            oauth_dovecot.imap_append(oauth_box, [raw_mail(n)])
            wait_until(f"message {n}", lambda: count() == n + 1)
            time.sleep(3.5)
        assert oauth_server.refresh_count >= 3  # refreshed as tokens expired
        assert accounts(app, admin)[account_id]["status"] == "active"
        assert supervisor.owner.holds(account_id)

        oauth_server.revoke()
        wait_until(
            "reauth_required",
            lambda: accounts(app, admin)[account_id]["status"] == "reauth_required",
        )
        wait_until("the watch given up", lambda: not supervisor.owner.holds(account_id))
        assert len(messages(app, admin, accountId=account_id)) == 3
    finally:
        stop.set()
        supervisor.inbox.tell(Wake())
        thread.join(timeout=30)
    assert not thread.is_alive()
