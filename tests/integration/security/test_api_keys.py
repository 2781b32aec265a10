"""API keys held to the second audit, on both backends: a tenant's keys are capped and
listed (never their secrets), revoking a key revokes what it minted, and a shredded
tenant's keys authenticate no more."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from application import SYSTEM_TENANT_ID, User
from application.api_keys import keys
from application.api_keys.authenticate import authenticate
from application.api_keys.catalog_fill import fill_catalogs
from application.app import App
from application.streams import commit
from domain.api_key import ApiKey, ApiKeyCatalog, ApiKeyListed
from infrastructure.bootstrap import event_store
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
    secret = key.split("_", 2)[2]  # tdk_<id>_<secret>; the secret may hold "_" itself
    assert len(secret) == 43 and secret not in repr(items)  # the secret is never listed
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


def old_key(app: App, tenant_id: str, created_by: str, name: str) -> tuple[str, str]:
    """A key as created before tenants had catalogs: its own stream only."""
    new = keys.new_key()
    api_key = ApiKey(new.key_id)
    api_key.create(
        tenant_id=tenant_id,
        name=name,
        roles=frozenset({"TenantAdmin"}),
        secret_digest=keys.digest(new.secret),
        created_by=created_by,
        now=app.ctx.clock.now(),
    )
    commit(app.ctx.store, api_key)
    return new.text, str(new.key_id)


def test_keys_from_before_the_catalogs_are_listed_revocable_and_counted_after_the_fill(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app(api_keys_per_tenant=3)
    stolen_key, stolen_id = old_key(app, admin.tenant_id, admin.id, "stolen")
    child_key, _ = old_key(app, admin.tenant_id, f"api-key:{stolen_id}", "child")
    _, gone_id = old_key(app, admin.tenant_id, admin.id, "revoked before")
    ok(app.write("revoke-api-key", {"apiKeyId": gone_id}, admin))
    _, other_id = old_key(app, "another-tenant", "someone", "theirs")
    assert ok(app.query("list-api-keys", {}, admin))["items"] == []  # what the audit found

    log = event_store(app)
    assert fill_catalogs(app.ctx.store, log, app.ctx.clock.now()) == 3
    assert fill_catalogs(app.ctx.store, log, app.ctx.clock.now()) is None, "once per store"
    listed = ok(app.query("list-api-keys", {}, admin))["items"]
    assert [(i["name"], i["createdBy"]) for i in listed] == [
        ("stolen", admin.id),
        ("child", f"api-key:{stolen_id}"),
    ]
    ok(app.write("create-api-key", {"name": "third", "roles": ["TenantAdmin"]}, admin))
    failed(
        app.write("create-api-key", {"name": "over", "roles": ["TenantAdmin"]}, admin),
        "api_key_limit",
        422,
    )
    ok(app.write("revoke-api-key", {"apiKeyId": stolen_id}, admin))
    assert authenticate(app.ctx, stolen_key) is None
    assert authenticate(app.ctx, child_key) is None, "what the old key minted goes with it"
    assert other_id not in {i["apiKeyId"] for i in listed}


def test_two_processes_filling_at_once_list_each_key_once(
    make_app: Callable[..., App], admin: User
) -> None:
    apps = [make_app(), make_app()]
    for n in range(5):
        old_key(apps[0], admin.tenant_id, admin.id, f"k{n}")
    answers: list[int | None] = []

    def fill(app: App) -> None:
        answers.append(fill_catalogs(app.ctx.store, event_store(app), app.ctx.clock.now()))

    threads = [threading.Thread(target=fill, args=(app,)) for app in apps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 2
    assert len(ok(apps[1].query("list-api-keys", {}, admin))["items"]) == 5
    catalog = apps[1].ctx.store.load(ApiKeyCatalog.id_for(admin.tenant_id))
    assert len([e for e in catalog if isinstance(e, ApiKeyListed)]) == 5, "each listed once"
