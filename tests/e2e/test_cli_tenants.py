"""``tidings tenants shred ID``: one line (or ``--json``), and the tenant's values read as
erased afterwards, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import subprocess

from tests.e2e.process import Cli

ADMIN = json.dumps({"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]})
GET_C1 = json.dumps({"entityName": "contact", "entityId": "c1"})


def ok(process: subprocess.CompletedProcess[str]) -> str:
    assert process.returncode == 0, process.stderr
    return process.stdout


def test_tenants_shred_erases_the_tenants_values(cli: Cli) -> None:
    field = '{"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}}'
    ok(cli("write", "define-tenant-field", "--as", ADMIN, "--payload", field))
    value = '{"entityName": "contact", "entityId": "c1", "fieldKey": "tier", "value": "gold"}'
    ok(cli("write", "set-custom-field", "--as", ADMIN, "--payload", value))
    ok(cli("projections", "run", "--once"))

    shredded = ok(cli("tenants", "shred", "acme"))
    assert shredded.splitlines() == ["tenant acme shredded: its sealed data is erased for good"]
    again = ok(cli("tenants", "shred", "acme", "--json"))
    assert json.loads(again) == {"tenantId": "acme", "shredded": True}
    answer = json.loads(
        ok(cli("query", "get-entity", "--as", ADMIN, "--payload", GET_C1, "--json"))
    )
    assert answer["customFields"] == {"tier": "[erased]"}

    refused = cli("tenants", "shred", "system")
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "error: 422 system_tenant_not_allowed: the system tenant cannot be shredded"
    ]
