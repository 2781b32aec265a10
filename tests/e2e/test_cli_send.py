"""Sending from the command line, on SQLite and on PostgreSQL, each step a process of its
own: `tidings write connect-mail-account` with `smtp`, `tidings mail send`, a `tidings
worker` that sends the message through a private Postfix, and `tidings worker --once`
that ingests it in the recipient's account; the same idempotency key sends nothing
new."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from infrastructure.devkit.processes import free_port
from tests.e2e.process import Cli
from tests.support.dovecot import DovecotServer
from tests.support.postfix import DOMAIN, PostfixServer, dovecot_config

ADMIN = json.dumps({"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]})
WAIT = 60.0


@pytest.fixture
def servers() -> Iterator[tuple[DovecotServer, PostfixServer]]:
    lmtp_port = free_port()
    with (
        DovecotServer(extra_config=dovecot_config(lmtp_port)) as dovecot,
        PostfixServer(dovecot, lmtp_port) as postfix,
    ):
        yield dovecot, postfix


def _ok(process: subprocess.CompletedProcess[str]) -> Any:
    assert process.returncode == 0, process.stderr
    return json.loads(process.stdout)


def test_send_from_the_command_line_through_a_worker(
    cli: Cli, servers: tuple[DovecotServer, PostfixServer]
) -> None:
    dovecot, postfix = servers
    accounts = {}
    for name in ("alice", "bob"):
        box = dovecot.add_user(f"{name}{uuid.uuid4().hex[:6]}", secrets.token_urlsafe(9))
        payload = {
            "provider": "imap",
            "displayName": name,
            "address": f"{box.name}@{DOMAIN}",
            "scope": "shared",
            "authMethod": "password",
            "imap": {
                "host": dovecot.host,
                "port": dovecot.port,
                "security": "none",
                "username": box.name,
            },
            "smtp": {
                "host": postfix.host,
                "port": postfix.submission_port,
                "security": "starttls",
                "username": box.name,
            },
            "secret": box.password,
        }
        written = cli(
            "write",
            "connect-mail-account",
            "--as",
            ADMIN,
            "--payload",
            json.dumps(payload),
            "--json",
        )
        accounts[name] = (_ok(written)["accountId"], box)
    alice_id, _ = accounts["alice"]
    bob_id, bob = accounts["bob"]
    send = (
        "mail",
        "send",
        alice_id,
        "--as",
        ADMIN,
        "--to",
        f"{bob.name}@{DOMAIN}",
        "--subject",
        "From the command line",
        "--text",
        "hello",
        "--idempotency-key",
        "cli-1",
        "--json",
    )
    queued = _ok(cli(*send))
    assert queued["state"] == "queued"
    again = _ok(cli(*send))
    assert (again["outboundId"], again["replayed"]) == (queued["outboundId"], True)

    worker = cli.popen(
        "worker",
        "--worker-id",
        "w-send",
        "--projections",
        smtp_ca_file=str(postfix.ca_file),
        send_retry_first="1",
    )
    try:
        deadline = time.monotonic() + WAIT
        state = None
        while time.monotonic() < deadline and state != "sent":
            time.sleep(0.3)
            got = cli(
                "query",
                "get-outbound",
                "--as",
                ADMIN,
                "--payload",
                json.dumps({"outboundId": queued["outboundId"]}),
                "--json",
            )
            state = _ok(got)["state"] if got.returncode == 0 else None
        assert state == "sent"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    # One poll pass: the recipient's account ingests what Postfix delivered.
    deadline = time.monotonic() + WAIT
    received: list[str] = []
    while time.monotonic() < deadline and not received:
        assert cli("worker", "--once").returncode == 0
        listed = cli(
            "query",
            "list-messages",
            "--as",
            ADMIN,
            "--payload",
            json.dumps({"accountId": bob_id}),
            "--json",
        )
        received = [m["subject"] for m in _ok(listed)["items"]]
    assert received == ["From the command line"]
    assert len(postfix.message_ids()) == 1, "the replayed request sent nothing new"
