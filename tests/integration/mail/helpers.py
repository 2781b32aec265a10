"""Helpers for the mail integration tests: results, connecting a Dovecot mailbox,
reading every message an app lists, and raw test messages."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

from application import User
from application.app import App
from infrastructure.bootstrap import open_database
from infrastructure.sql.database import DatabaseUrl
from infrastructure.sql.flag_state import SqlFlagState
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok

NOW = datetime.now(UTC).replace(microsecond=0)
RECENT = NOW - timedelta(days=2)
OLD = NOW - timedelta(days=90)


def connect_payload(dovecot: DovecotServer, box: DovecotUser, **overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "provider": "imap",
        "displayName": f"Box {box.name}",
        "address": f"{box.name}@mailbox.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {
            "host": dovecot.host,
            "port": dovecot.port,
            "security": "none",
            "username": box.name,
        },
        "secret": box.password,
    }
    payload.update(overrides)
    return payload


def connect(
    app: App, user: User, dovecot: DovecotServer, box: DovecotUser, **overrides: Any
) -> str:
    data = ok(app.write("connect-mail-account", connect_payload(dovecot, box, **overrides), user))
    account_id: str = data["accountId"]
    return account_id


def messages(app: App, user: User, **filters: Any) -> list[dict[str, Any]]:
    """Every message the user can list (all pages), after a catch-up."""
    app.projections.catch_up()
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        data = ok(app.query("list-messages", {**filters, "limit": 100, "cursor": cursor}, user))
        items.extend(data["items"])
        cursor = data["nextCursor"]
        if cursor is None:
            return items


def accounts(app: App, user: User) -> dict[str, dict[str, Any]]:
    app.projections.catch_up()
    data = ok(app.query("list-mail-accounts", {}, user))
    return {item["accountId"]: item for item in data["items"]}


def threads(app: App, user: User, **filters: Any) -> list[dict[str, Any]]:
    app.projections.catch_up()
    items: list[dict[str, Any]] = ok(app.query("list-threads", {**filters, "limit": 100}, user))[
        "items"
    ]
    return items


def count_events(app: App, topic: str) -> int:
    """Events of one topic in the whole store (read through the log port)."""
    store: Any = app.ctx.store
    total = position = 0
    while True:
        batch = store.read_raw(position, 1000)
        if not batch:
            return total
        total += sum(1 for n in batch if n.topic == topic)
        position = batch[-1].id


def raw_mail(
    n: int,
    *,
    subject: str | None = None,
    sender: str | None = None,
    to: str = "Team <team@tidings-dest.example>",
    date: datetime | None = None,
    message_id: str | None = None,
    extra_headers: str = "",
    body: str | None = None,
    pad_to: int = 0,
) -> bytes:
    """A CRLF text/plain message (RFC822.SIZE equals its length)."""
    mid = message_id or f"<{n}.{uuid.uuid4().hex}@test.example>"
    head = (
        f"Message-ID: {mid}\r\n"
        f"Date: {format_datetime(date or RECENT)}\r\n"
        f"From: {sender or f'Sender {n} <sender{n}.{uuid.uuid4().hex[:6]}@origin.example>'}\r\n"
        f"To: {to}\r\n"
        f"Subject: {subject if subject is not None else f'Subject {n}'}\r\n"
        f"{extra_headers}"
        "MIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "\r\n"
    ).encode()
    raw = head + ((body if body is not None else f"Body of message {n}.") + "\r\n").encode()
    if pad_to > len(raw):
        line = b"y" * 76 + b"\r\n"
        raw += line * ((pad_to - len(raw)) // len(line))
    return raw


def forget_uid_map(database_url: str, account_id: str) -> int:
    """Drop the account's UID map, flag cursors and the map's rebuild walk, as for
    messages stored before they existed; how many map rows there were."""
    db = open_database(DatabaseUrl.parse(database_url))
    try:
        state = SqlFlagState(db)
        rows = state.mapped(account_id)
        state.forget(account_id)
        return len(rows)
    finally:
        db.close()
