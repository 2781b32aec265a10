"""Mail accounts for tests that only look at them: connected through the handler on a
loopback host that is never dialled (no ``verify``), projections caught up."""

from __future__ import annotations

import uuid

from application import User
from application.app import App


def connect(app: App, user: User, name: str = "Box", *, smtp: bool = False) -> str:
    payload = {
        "provider": "imap",
        "displayName": name,
        "address": f"box-{uuid.uuid4().hex[:6]}@mail.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": "127.0.0.1", "port": 1, "security": "none", "username": "u"},
        "secret": "pw",
    }
    if smtp:  # to queue mail (never sent: no worker runs)
        payload["smtp"] = {"host": "127.0.0.1", "port": 1, "security": "tls", "username": "u"}
    result = app.write("connect-mail-account", payload, user)
    assert result.is_success, result.error
    assert result.data is not None
    app.projections.catch_up()
    return str(result.data["accountId"])
