"""Sending fixtures: a private Dovecot with LMTP and SASL for Postfix, and a private
Postfix (submission on STARTTLS and implicit TLS) delivering into it, once for the
session (every test makes fresh Dovecot users; a test that stops Postfix takes
``own_servers``);
apps on this test's database (both backends) with the Postfix CA trusted; accounts of
fresh Dovecot users at ``example.test`` that send through Postfix."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from application import User
from application.mail.outbound.delivery import OutboundDelivery
from infrastructure.bootstrap_workers import build_outbound_delivery
from infrastructure.devkit.processes import free_port
from tests.integration.mail.conftest import MailApp, MakeMailApp, make_mail_app
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.postfix import DOMAIN, PostfixServer, dovecot_config
from tests.support.results import ok

__all__ = ["make_mail_app"]

ADMIN = User(id="admin", tenant_id="t-send", roles=frozenset({"TenantAdmin"}))


@dataclass
class Servers:
    dovecot: DovecotServer
    postfix: PostfixServer


def _servers() -> Iterator[Servers]:
    lmtp_port = free_port()
    with (
        DovecotServer(extra_config=dovecot_config(lmtp_port)) as dovecot,
        PostfixServer(dovecot, lmtp_port) as postfix,
    ):
        yield Servers(dovecot, postfix)


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    yield from _servers()


@pytest.fixture
def own_servers() -> Iterator[Servers]:
    """A Dovecot and Postfix of the test's own (it stops and starts them)."""
    yield from _servers()


@dataclass
class Sender:
    """An app, its delivery (one worker's), and ways to make accounts on the servers."""

    mail: MailApp
    servers: Servers
    delivery: OutboundDelivery

    @property
    def app(self) -> Any:
        return self.mail.app

    def mailbox(self) -> DovecotUser:
        return self.servers.dovecot.add_user("u" + uuid.uuid4().hex[:10], secrets.token_urlsafe(9))

    def account(self, box: DovecotUser, *, smtp_port: int | None = None, **smtp: Any) -> str:
        dovecot, postfix = self.servers.dovecot, self.servers.postfix
        payload = {
            "provider": "imap",
            "displayName": box.name,
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
                "port": smtp_port or postfix.submission_port,
                "security": "starttls",
                "username": box.name,
                **smtp,
            },
            "secret": box.password,
        }
        data = ok(self.app.write("connect-mail-account", payload, ADMIN))
        return str(data["accountId"])

    def send(self, account_id: str, **fields: Any) -> dict[str, Any]:
        payload = {
            "accountId": account_id,
            "to": [],
            "subject": "hello",
            "text": "hello there",
            "idempotencyKey": uuid.uuid4().hex,
            **fields,
        }
        result = self.app.write("send-message", payload, ADMIN)
        return ok(result)

    def outbound(self, outbound_id: str) -> dict[str, Any]:
        self.app.projections.catch_up()
        return ok(self.app.query("get-outbound", {"outboundId": outbound_id}, ADMIN))


MakeSender = Callable[..., Sender]


@pytest.fixture
def make_sender(make_mail_app: MakeMailApp, servers: Servers) -> Iterator[MakeSender]:
    deliveries: list[OutboundDelivery] = []

    def make(holder: str = "w1", own: Servers | None = None, **overrides: Any) -> Sender:
        used = own or servers
        settings: dict[str, Any] = {
            "smtp_ca_file": used.postfix.ca_file,
            "send_attempt_timeout": 10.0,
            "send_retry_first": 0.2,
            "send_retry_longest": 0.5,
            **overrides,
        }
        mail = make_mail_app(**settings)
        delivery = build_outbound_delivery(mail.app, mail.settings, holder)
        deliveries.append(delivery)
        return Sender(mail, used, delivery)

    yield make
    for delivery in deliveries:  # the kept SMTP connections
        delivery.close()


@pytest.fixture
def sender(make_sender: MakeSender) -> Sender:
    return make_sender()
