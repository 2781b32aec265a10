"""list-tenant-health (both backends): every tenant's accounts by status, failing ones by
kind, the oldest sync and the never synced, for the system's SystemAdmin only, counts
without any name or address, a page of tenants at a time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from application import SYSTEM_TENANT_ID, User
from application.app import App
from application.mail.state import ErrorKind
from tests.support.accounts import connect
from tests.support.results import ok

SYSTEM = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))


def test_each_tenants_health_in_counts(app: App, admin: User) -> None:
    other = User(id="o", tenant_id=admin.tenant_id + "-b", roles=frozenset({"TenantAdmin"}))
    a1, a2, a3 = (connect(app, admin, f"Secret name {n}") for n in range(3))
    connect(app, other, "Other secret")
    assert app.write("disconnect-mail-account", {"accountId": a3}, admin).is_success
    app.projections.catch_up()
    state = app.ctx.mail.state
    synced = datetime.now(UTC) - timedelta(hours=1)
    state.record_synced({a1: None}, synced)
    state.record_failure(a2, ErrorKind.AUTH, datetime.now(UTC))

    answer = ok(app.query("list-tenant-health", {}, SYSTEM))
    assert answer["total"] == 2 and answer["nextCursor"] is None
    mine, theirs = answer["items"]
    assert mine == {
        "tenantId": admin.tenant_id,
        "accounts": 3,
        "statusCounts": {"active": 2, "disconnected": 1},
        "failing": 1,
        "failingByKind": {"auth": 1},
        "oldestSyncAt": synced.isoformat(),
        "neverSynced": 1,
    }
    assert theirs["tenantId"] == other.tenant_id and theirs["neverSynced"] == 1
    assert "Secret" not in str(answer) and "mail.example" not in str(answer)

    first = ok(app.query("list-tenant-health", {"limit": 1}, SYSTEM))
    assert [t["tenantId"] for t in first["items"]] == [admin.tenant_id]
    second = ok(
        app.query("list-tenant-health", {"limit": 1, "cursor": first["nextCursor"]}, SYSTEM)
    )
    assert [t["tenantId"] for t in second["items"]] == [other.tenant_id]


def test_only_the_system_admin_sees_every_tenant(app: App, admin: User) -> None:
    connect(app, admin)
    for user in (
        admin,
        User(id="x", tenant_id=admin.tenant_id, roles=frozenset({"SystemAdmin", "TenantAdmin"})),
        User(id="y", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"TenantAdmin"})),
    ):
        refused = app.query("list-tenant-health", {}, user)
        assert refused.error is not None and refused.error.status == 403
