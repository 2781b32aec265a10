"""Secrets go only where they were given, and no account points inside our network.

Control characters in host, username or secret are 400 at connect and update; a change
of host, port, security or username without the secret again is 422 secret_required
(and the old password never reaches the new server); hosts that resolve to internal
addresses are 422 host_not_allowed unless TIDINGS_ALLOW_PRIVATE_HOSTS is set, and
``verify`` against one makes no connection.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from application import User
from application.app import App
from application.mail.state import ErrorKind
from infrastructure.bootstrap_workers import build_syncer
from infrastructure.runtime.settings import Settings
from tests.integration.security.login_recorder import LoginRecorder
from tests.support.results import failed, ok
from workers.once import poll_once

OLD_SECRET = "oldSecret4711"
NEW_SECRET = "newSecret0815"


def connect_payload(port: int, host: str = "127.0.0.1", **overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "provider": "imap",
        "displayName": "Box",
        "address": "box@mailbox.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": host, "port": port, "security": "none", "username": "box"},
        "secret": OLD_SECRET,
    }
    payload.update(overrides)
    return payload


def imap(port: int = 143, host: str = "127.0.0.1", **overrides: Any) -> dict[str, Any]:
    return {"host": host, "port": port, "security": "none", "username": "box", **overrides}


def poll(app: App, database_url: str, tmp_path: Path) -> None:
    settings = Settings(
        database_url=database_url, blob_dir=tmp_path / "blobs", allow_private_hosts=True
    )
    poll_once(app, build_syncer(app, settings), concurrency=2, deadline_seconds=30.0)


@pytest.mark.parametrize(
    ("where", "bad"),
    [
        ("username", "box\r\nA1 DELETE INBOX"),
        ("username", "box\nx"),
        ("username", "box\x00"),
        ("secret", "pw\r\nA1 LOGOUT"),
        ("secret", "pw\x00"),
        ("host", "127.0.0.1\r\nx"),
        ("host", "mail.example\x00"),
        ("host", "mail example"),
    ],
)
def test_control_characters_are_400_at_connect_and_update(
    app: App, admin: User, where: str, bad: str
) -> None:
    if where == "secret":
        payload = connect_payload(143, secret=bad)
        update: dict[str, Any] = {"secret": bad}
    else:
        payload = connect_payload(143, imap=imap(143, **{where: bad}))
        update = {"imap": imap(143, **{where: bad}), "secret": NEW_SECRET}
    errors = failed(app.write("connect-mail-account", payload, admin), "invalid_payload", 400)
    assert errors["errors"][0]["path"].endswith(where)
    account_id = ok(app.write("connect-mail-account", connect_payload(143), admin))["accountId"]
    errors = failed(
        app.write("update-mail-account", {"accountId": account_id, **update}, admin),
        "invalid_payload",
        400,
    )
    assert errors["errors"][0]["path"].endswith(where)


@pytest.mark.parametrize(
    "change",
    [{"host": "localhost"}, {"port": 1143}, {"security": "tls"}, {"username": "other"}],
    ids=["host", "port", "security", "username"],
)
def test_changing_the_endpoint_needs_the_secret_again(
    app: App, admin: User, change: dict[str, Any]
) -> None:
    account_id = ok(app.write("connect-mail-account", connect_payload(143), admin))["accountId"]
    ref = {"accountId": account_id}
    failed(
        app.write("update-mail-account", {**ref, "imap": imap(**change)}, admin),
        "secret_required",
        422,
    )
    # The same endpoint again, or a display-name change, needs no secret.
    ok(app.write("update-mail-account", {**ref, "imap": imap(143)}, admin))
    ok(app.write("update-mail-account", {**ref, "displayName": "Renamed"}, admin))
    ok(
        app.write(
            "update-mail-account", {**ref, "imap": imap(**change), "secret": NEW_SECRET}, admin
        )
    )


def test_the_stored_password_is_never_sent_to_a_new_host(
    app: App, admin: User, database_url: str, tmp_path: Path
) -> None:
    with LoginRecorder() as first, LoginRecorder() as second:
        account_id = ok(app.write("connect-mail-account", connect_payload(first.port), admin))[
            "accountId"
        ]
        ref = {"accountId": account_id}
        failed(
            app.write("update-mail-account", {**ref, "imap": imap(second.port)}, admin),
            "secret_required",
            422,
        )
        poll(app, database_url, tmp_path)
        assert OLD_SECRET.encode() in first.received  # the recorder does see logins
        assert second.connections == 0

        ok(
            app.write(
                "update-mail-account",
                {**ref, "imap": imap(second.port), "secret": NEW_SECRET},
                admin,
            )
        )
        ok(app.write("reconnect-mail-account", ref, admin))  # the first login failed
        poll(app, database_url, tmp_path)
        assert NEW_SECRET.encode() in second.received
        assert OLD_SECRET.encode() not in second.received


INTERNAL_HOSTS = [
    "127.0.0.1",
    "127.8.9.10",
    "10.1.2.3",
    "172.16.0.5",
    "192.168.1.1",
    "169.254.169.254",
    "0.0.0.0",
    "224.0.0.1",
    "::1",
    "::",
    "fc00::1",
    "fd12:3456::1",
    "fe80::1",
    "::ffff:127.0.0.1",
    "[::1]",
    "localhost",
]


@pytest.mark.parametrize("host", INTERNAL_HOSTS)
def test_internal_hosts_are_refused_at_connect_and_update(
    make_app: Callable[..., App], admin: User, host: str
) -> None:
    strict = make_app(allow_private_hosts=False)
    details = failed(
        strict.write("connect-mail-account", connect_payload(143, host), admin),
        "host_not_allowed",
        422,
    )
    assert details["setting"] == "TIDINGS_ALLOW_PRIVATE_HOSTS"
    # An account made where private hosts were allowed cannot be moved inside either.
    account_id = ok(
        make_app().write("connect-mail-account", connect_payload(143, "mail.invalid"), admin)
    )["accountId"]
    failed(
        strict.write(
            "update-mail-account",
            {"accountId": account_id, "imap": imap(143, host), "secret": NEW_SECRET},
            admin,
        ),
        "host_not_allowed",
        422,
    )


def test_verify_against_an_internal_host_makes_no_connection(
    make_app: Callable[..., App], admin: User
) -> None:
    strict = make_app(allow_private_hosts=False)
    with LoginRecorder() as server:
        for host in ("127.0.0.1", "localhost"):
            payload = connect_payload(server.port, host, verify=True)
            failed(strict.write("connect-mail-account", payload, admin), "host_not_allowed", 422)
        assert server.connections == 0
        # Allowed, the same verify does reach it (and the recorder refuses the login).
        payload = connect_payload(server.port, verify=True)
        failed(make_app().write("connect-mail-account", payload, admin), "mailbox_auth_failed", 422)
        assert server.connections == 1


def test_a_poll_does_not_connect_to_a_host_that_became_internal(
    make_app: Callable[..., App], admin: User, database_url: str, tmp_path: Path
) -> None:
    """The adapter checks again at connection time: an account that points inside
    (here: made while allowed) is not contacted by a strict worker."""
    with LoginRecorder() as server:
        ok(make_app().write("connect-mail-account", connect_payload(server.port), admin))
        strict = make_app(allow_private_hosts=False)
        settings = Settings(database_url=database_url, blob_dir=tmp_path / "blobs")
        [outcome] = poll_once(
            strict, build_syncer(strict, settings), concurrency=1, deadline_seconds=30.0
        )
        assert outcome.error_kind == ErrorKind.HOST_NOT_ALLOWED
        assert server.connections == 0
        [account] = ok(strict.query("list-mail-accounts", {}, admin))["items"]
        assert account["health"]["lastErrorKind"] == "host_not_allowed"
        assert account["status"] == "active"  # the tenant may fix the host (or its DNS)
