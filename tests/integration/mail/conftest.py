"""Mail integration fixtures: one private Dovecot for the session, a fresh mailbox user
per test, and apps (SQLite file or PostgreSQL schema, via ``make_app``) wired with a
blob store, a master key and the poll's unit of work (``bootstrap.build_syncer``)."""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from application.app import App
from application.mail.account_sync import AccountSync
from application.mail.sync_outcome import SyncOutcome
from infrastructure.bootstrap_workers import build_syncer
from infrastructure.runtime.settings import Settings
from tests.support.dovecot import DovecotServer, DovecotUser, dovecot_available
from workers.once import poll_once

MASTER_KEY = base64.b64encode(secrets.token_bytes(32)).decode()


@pytest.fixture(scope="session")
def dovecot() -> Iterator[DovecotServer]:
    if not dovecot_available():
        pytest.fail(
            "dovecot is not installed: the mail integration suite needs a real server "
            "(Debian 12: apt-get install -y dovecot-core dovecot-imapd)",
            pytrace=False,
        )
    with DovecotServer() as server:
        yield server


@pytest.fixture
def new_mailbox(dovecot: DovecotServer) -> Callable[[], DovecotUser]:
    """A fresh random Dovecot user (own uid and maildir) each call."""

    def make() -> DovecotUser:
        return dovecot.add_user("u" + uuid.uuid4().hex[:12], secrets.token_urlsafe(12))

    return make


@pytest.fixture
def mailbox(new_mailbox: Callable[[], DovecotUser]) -> DovecotUser:
    return new_mailbox()


@dataclass
class MailApp:
    """An app plus the poll pass that ``tidings worker --once`` runs."""

    app: App
    settings: Settings
    syncer: AccountSync

    def poll(self, concurrency: int = 4) -> list[SyncOutcome]:
        return poll_once(self.app, self.syncer, concurrency=concurrency, deadline_seconds=60.0)

    def outcome(self, account_id: str, outcomes: list[SyncOutcome]) -> SyncOutcome:
        [found] = [o for o in outcomes if o.account_id == account_id]
        return found


MakeMailApp = Callable[..., MailApp]


@pytest.fixture
def make_mail_app(make_app: Callable[..., App], database_url: str, tmp_path: Path) -> MakeMailApp:
    """Apps on this test's database sharing one blob dir and master key (like processes)."""

    def make(**overrides: Any) -> MailApp:
        settings: dict[str, Any] = {
            "blob_dir": tmp_path / "blobs",
            "master_key": MASTER_KEY,
            "imap_read_timeout": 30.0,
            **overrides,
        }
        app = make_app(**settings)
        full = Settings(database_url=database_url, project_inline=False, **settings)
        return MailApp(app, full, build_syncer(app, full))

    return make


@pytest.fixture
def mail(make_mail_app: MakeMailApp) -> MailApp:
    return make_mail_app()
