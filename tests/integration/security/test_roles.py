"""Roles are bound to tenants: SystemAdmin acts only in the system tenant.

A user of tenant B that claims SystemAdmin answers 403 for every SystemAdmin-only
handler and gains no power anywhere: it cannot change system fields for every tenant
nor ingest mail into tenant A's accounts.
"""

from __future__ import annotations

import uuid
from typing import Any

from application import User
from application.app import App
from tests.support.results import failed, ok

SYSTEM_FIELD = {"entityName": "contact", "fieldKey": "vip", "field": {"type": "boolean"}}


def ingest(account_id: str) -> dict[str, Any]:
    return {
        "accountId": account_id,
        "providerMessageId": "emailid:forged-1",
        "subject": "forged",
        "receivedAt": "2024-05-01T10:00:00Z",
        "sizeBytes": 10,
    }


def account(app: App, admin: User) -> str:
    payload = {
        "provider": "imap",
        "displayName": "Box",
        "address": "box@mailbox.example",
        "scope": "shared",
        "authMethod": "password",
        "imap": {"host": "127.0.0.1", "port": 143, "security": "none", "username": "box"},
        "secret": "pw",
    }
    account_id: str = ok(app.write("connect-mail-account", payload, admin))["accountId"]
    return account_id


def test_system_admin_of_another_tenant_has_no_system_power(
    app: App, admin: User, operator: User
) -> None:
    tenant_b = "t-" + uuid.uuid4().hex[:8]
    impostor = User("mallory", tenant_b, frozenset({"SystemAdmin", "TenantAdmin"}))
    assert "SystemAdmin" not in impostor.roles  # resolved away where roles are resolved
    account_a = account(app, admin)

    failed(app.write("define-system-field", SYSTEM_FIELD, impostor), "forbidden", 403)
    failed(app.write("ingest-message", ingest(account_a), impostor), "forbidden", 403)
    solely = User("mallory", tenant_b, frozenset({"SystemAdmin"}))
    failed(app.write("define-system-field", SYSTEM_FIELD, solely), "forbidden", 403)
    failed(app.write("ingest-message", ingest(account_a), solely), "forbidden", 403)

    # The real operator can, and the impostor cannot delete what it defined.
    ok(app.write("define-system-field", SYSTEM_FIELD, operator))
    ref = {"entityName": "contact", "fieldKey": "vip"}
    failed(app.write("delete-system-field", ref, impostor), "forbidden", 403)
    ok(app.write("ingest-message", ingest(account_a), operator))
    app.projections.catch_up()

    # Tenant A sees the operator's message only; tenant B's impostor sees nothing of A.
    items = ok(app.query("list-messages", {"limit": 10}, admin))["items"]
    assert [item["subject"] for item in items] == ["forged"]
    failed(app.query("list-messages", {"accountId": account_a}, impostor), "not_found", 404)
    ok(app.write("delete-system-field", ref, operator))
