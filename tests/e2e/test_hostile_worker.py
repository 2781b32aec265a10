"""``tidings worker --once`` as a process against hostile IMAP servers, on SQLite and
PostgreSQL: dripping servers cannot hold it past its poll deadline, and servers that
announce 1 GB literals cannot take its memory."""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.process import Cli, command
from tests.support.dovecot import DovecotServer, dovecot_available
from tests.support.hostile_imap import BIG, HostileImapServer, HostileMessage, Script
from tests.support.messages import make_message
from tests.support.oauth_server import OAuthServer

ADMIN = json.dumps({"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]})
POLL_DEADLINE = 5.0
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def dovecot() -> Iterator[DovecotServer]:
    if not dovecot_available():
        pytest.fail("dovecot is not installed (apt-get install dovecot-imapd)", pytrace=False)
    with DovecotServer() as server:
        yield server


def ok(process: subprocess.CompletedProcess[str]) -> str:
    assert process.returncode == 0, process.stderr
    return process.stdout


def connect(cli: Cli, host: str, port: int, username: str, secret: str) -> str:
    payload: dict[str, Any] = {
        "provider": "imap",
        "displayName": username,
        "address": f"{username}@mail.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": host, "port": port, "security": "none", "username": username},
        "secret": secret,
    }
    written = ok(
        cli("write", "connect-mail-account", "--as", ADMIN, "--payload", json.dumps(payload))
    )
    account_id: str = json.loads(written)["accountId"]
    return account_id


def error_kinds(cli: Cli) -> dict[str, str | None]:
    listed = json.loads(ok(cli("accounts", "list", "--json")))
    return {row["accountId"]: row["lastErrorKind"] for row in listed["items"]}


def test_worker_once_ends_within_the_poll_deadline_whatever_two_dripping_servers_do(
    cli: Cli, dovecot: DovecotServer
) -> None:
    box = dovecot.add_user("u" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))
    dovecot.deliver(box, [make_message(n) for n in range(3)])
    drip = Script([HostileMessage(1)], drip_from="greeting", drip_seconds=1.0)
    with (
        HostileImapServer(drip, lifetime=90) as first,
        HostileImapServer(drip, lifetime=90) as second,
    ):
        healthy = connect(cli, dovecot.host, dovecot.port, box.name, box.password)
        dripping = [connect(cli, s.host, s.port, "drip", "pw") for s in (first, second)]
        started = time.monotonic()
        ran = cli("worker", "--once", "--json", poll_deadline=str(POLL_DEADLINE))
        took = time.monotonic() - started
    assert ran.returncode == 0, ran.stderr
    assert took < POLL_DEADLINE + 10.0, took
    summary = json.loads(ran.stdout)
    assert summary["ingested"] == 3
    assert summary["failed"] == {account: "timeout" for account in dripping}
    kinds = error_kinds(cli)
    assert kinds[healthy] is None
    assert all(kinds[account] == "timeout" for account in dripping)


# Runs the worker as its own child and reports that child's peak RSS (KiB): the only
# child this wrapper waits for, so RUSAGE_CHILDREN is the worker's alone.
PEAK = textwrap.dedent(
    """
    import json, resource, subprocess, sys
    done = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    report = {"code": done.returncode, "out": done.stdout, "err": done.stderr}
    print(json.dumps({**report, "peak_kib": peak}))
    """
)


def test_worker_once_stays_under_250_mib_whatever_three_servers_announce(cli: Cli) -> None:
    # Each server says its first message is small, then announces ~1 GB for its body and
    # sends all of it; the second message is ordinary.
    scripts = [Script([HostileMessage(1, body_literal=BIG), HostileMessage(2)]) for _ in range(3)]
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(HostileImapServer(s, lifetime=150)) for s in scripts]
        ids = [connect(cli, s.host, s.port, f"big{n}", "pw") for n, s in enumerate(servers)]
        wrapper = subprocess.run(
            [sys.executable, "-c", PEAK, *command("worker", "--once", "--json")],
            cwd=cli.cwd,
            env={**cli.env, "TIDINGS_POLL_DEADLINE": "90"},
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
    assert wrapper.returncode == 0, wrapper.stderr
    report = json.loads(wrapper.stdout)
    assert report["code"] == 0, report["err"]
    assert report["peak_kib"] < 250 * 1024, report["peak_kib"]
    summary = json.loads(report["out"])
    assert summary["failed"] == {}
    assert summary["ingested"] == 6  # per account: one recorded too_large, one ordinary
    assert all(error_kinds(cli)[account] is None for account in ids)


def test_worker_once_ends_when_a_token_endpoint_drips_its_headers_and_records_it(
    cli: Cli,
) -> None:
    """The drip-server finding reopened through OAuth: a token endpoint that sends a
    status line and then a header byte at a time held ``worker --once`` past its poll
    deadline (killed at 100 s) and recorded nothing. The token request's wall-clock
    deadline ends it; the account records ``timeout``."""
    with OAuthServer() as tokens, HostileImapServer(Script([HostileMessage(1)])) as imap:
        payload: dict[str, Any] = {
            "provider": "imap",
            "displayName": "oauth",
            "address": "oauth@mail.example",
            "scope": "shared",
            "authMethod": "xoauth2",
            "imap": {"host": imap.host, "port": imap.port, "security": "none", "username": "o"},
            "oauth": {"provider": "custom", "refreshToken": "rt", "tokenUrl": tokens.token_url},
        }
        written = cli(
            "write", "connect-mail-account", "--as", ADMIN, "--payload", json.dumps(payload)
        )
        account_id = json.loads(ok(written))["accountId"]
        tokens.drip = 0.5
        started = time.monotonic()
        ran = cli("worker", "--once", "--json", poll_deadline="10", oauth_token_timeout="3")
        took = time.monotonic() - started
        tokens.drip = None
    assert ran.returncode == 0, ran.stderr
    assert took < 30, took
    assert error_kinds(cli)[account_id] == "timeout"
