"""API keys held to the second audit, on both backends: a tenant's keys are capped and
listed (never their secrets), revoking a key revokes what it minted, and a shredded
tenant's keys authenticate no more."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from application import SYSTEM_TENANT_ID, User
from application.api_keys.authenticate import authenticate
from application.app import App
from infrastructure.crypto.keyring import LIVE_RECHECK
from tests.support.results import failed, ok

OPERATOR = User(id="op", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))


def mint(app: App, user: User, name: str = "k") -> tuple[str, User]:
    """A new key, and the user it acts as."""
    data = ok(app.write("create-api-key", {"name": name, "roles": ["TenantAdmin"]}, user))
    acting = authenticate(app.ctx, data["key"])
    assert acting is not None
    return data["key"], acting


def test_keys_per_tenant_are_capped_even_when_created_at_once(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app(api_keys_per_tenant=5)
    answers: list[str] = []

    def create() -> None:
        result = app.write("create-api-key", {"name": "k", "roles": ["TenantAdmin"]}, admin)
        answers.append("ok" if result.is_success else result.error.code if result.error else "")

    threads = [threading.Thread(target=create) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Never past the cap; a loser retries, and past its retries answers 409 (retryable).
    assert 1 <= answers.count("ok") <= 5, answers
    assert set(answers) <= {"ok", "api_key_limit", "version_conflict"}, answers
    assert len(ok(app.query("list-api-keys", {}, admin))["items"]) == answers.count("ok")
    while len(ok(app.query("list-api-keys", {}, admin))["items"]) < 5:
        ok(app.write("create-api-key", {"name": "k", "roles": ["TenantAdmin"]}, admin))
    # A revoked key frees its place.
    first = ok(app.query("list-api-keys", {}, admin))["items"][0]["apiKeyId"]
    ok(app.write("revoke-api-key", {"apiKeyId": first}, admin))
    ok(app.write("create-api-key", {"name": "again", "roles": ["TenantAdmin"]}, admin))
    failed(
        app.write("create-api-key", {"name": "over", "roles": ["TenantAdmin"]}, admin),
        "api_key_limit",
        422,
    )


def test_list_api_keys_names_each_key_its_creator_and_last_use_without_secrets(
    make_app: Callable[..., App], admin: User, member: User
) -> None:
    app = make_app()
    key, acting = mint(app, admin, "crm")
    mint(app, acting, "child")
    items = ok(app.query("list-api-keys", {}, admin))["items"]
    by_name = {item["name"]: item for item in items}
    assert set(by_name) == {"crm", "child"}
    assert by_name["crm"]["createdBy"] == admin.id
    assert by_name["child"]["createdBy"] == acting.id
    assert by_name["crm"]["roles"] == ["TenantAdmin"]
    assert by_name["crm"]["createdAt"] is not None
    assert by_name["crm"]["lastUsedAt"] is not None  # authenticated by mint()
    assert key.split("_")[-1] not in repr(items)  # the secret part is never listed
    failed(app.query("list-api-keys", {}, member), "forbidden", 403)
    other = User(id="x", tenant_id="other-" + admin.tenant_id, roles=admin.roles)
    assert ok(app.query("list-api-keys", {}, other))["items"] == []


def test_revoking_a_key_revokes_every_key_it_minted(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app()
    stolen_key, stolen = mint(app, admin, "stolen")
    child_key, child = mint(app, stolen, "child")
    grandchild_key, _ = mint(app, child, "grandchild")
    sibling_key, _ = mint(app, admin, "sibling")
    revoked = ok(app.write("revoke-api-key", {"apiKeyId": stolen.id.split(":")[1]}, admin))
    assert len(revoked["alsoRevoked"]) == 2
    for key in (stolen_key, child_key, grandchild_key):
        assert authenticate(app.ctx, key) is None
    assert authenticate(app.ctx, sibling_key) is not None
    names = [item["name"] for item in ok(app.query("list-api-keys", {}, admin))["items"]]
    assert names == ["sibling"]


def test_a_shredded_tenants_keys_authenticate_no_more(
    make_app: Callable[..., App], admin: User
) -> None:
    server, operator = make_app(), make_app()  # two processes on one database
    key, acting = mint(server, admin)
    ok(server.query("list-field-definitions", {"entityName": "contact"}, acting))
    ok(operator.write("shred-tenant", {"tenantId": admin.tenant_id}, OPERATOR))
    assert authenticate(operator.ctx, key) is None  # the shredding process: at once
    deadline = time.monotonic() + LIVE_RECHECK + 3
    while authenticate(server.ctx, key) is not None:  # another process: within seconds
        assert time.monotonic() < deadline, "the shred was not seen"
        time.sleep(0.2)
