"""The webhook handlers on both backends: access, validation at the boundary, the
private-host rule, the secret shown once and sealed at rest, tenant isolation, and the
cap on a tenant's webhooks, which racing creators in several processes never pass."""

from __future__ import annotations

import threading
from collections.abc import Callable

from application import User
from application.app import App
from infrastructure.webhooks.tables import WEBHOOKS
from tests.support.results import failed, ok


def test_create_list_update_rotate_delete(app: App, admin: User) -> None:
    created = ok(
        app.write(
            "create-webhook",
            {"url": "http://127.0.0.1:9/in", "events": ["message.", "message.received"]},
            admin,
        )
    )
    assert created["secret"].startswith("whsec_") and created["events"] == [
        "message.",
        "message.received",
    ]
    listed = ok(app.query("list-webhooks", {}, admin))["webhooks"]
    assert [w["webhookId"] for w in listed] == [created["webhookId"]]
    assert "secret" not in listed[0]
    updated = ok(
        app.write(
            "update-webhook",
            {"webhookId": created["webhookId"], "events": ["*"], "enabled": False},
            admin,
        )
    )
    assert updated["events"] == ["*"] and updated["enabled"] is False
    rotated = ok(app.write("rotate-webhook-secret", {"webhookId": created["webhookId"]}, admin))
    assert rotated["secret"] != created["secret"]
    ok(app.write("delete-webhook", {"webhookId": created["webhookId"]}, admin))
    assert ok(app.query("list-webhooks", {}, admin))["webhooks"] == []
    failed(
        app.write("delete-webhook", {"webhookId": created["webhookId"]}, admin), "not_found", 404
    )


def test_the_secret_is_sealed_at_rest(app: App, admin: User) -> None:
    created = ok(
        app.write("create-webhook", {"url": "http://127.0.0.1:9/", "events": ["*"]}, admin)
    )
    db = app.ctx.webhooks.db  # type: ignore[attr-defined]
    with db.reading() as cur:
        cur.execute(f"SELECT secret FROM {WEBHOOKS}")
        stored = cur.fetchone()[0]
    assert created["secret"] not in stored and created["secret"][6:] not in stored


def test_members_and_other_tenants_cannot_touch_a_webhook(
    app: App, admin: User, member: User
) -> None:
    failed(
        app.write("create-webhook", {"url": "http://127.0.0.1:9/", "events": ["*"]}, member),
        "forbidden",
        403,
    )
    hook = ok(app.write("create-webhook", {"url": "http://127.0.0.1:9/", "events": ["*"]}, admin))
    stranger = User(id="x", tenant_id="other-" + admin.tenant_id, roles=admin.roles)
    for name in ("update-webhook", "delete-webhook", "rotate-webhook-secret"):
        failed(app.write(name, {"webhookId": hook["webhookId"]}, stranger), "not_found", 404)
    failed(
        app.query("list-webhook-deliveries", {"webhookId": hook["webhookId"]}, stranger),
        "not_found",
        404,
    )
    assert ok(app.query("list-webhooks", {}, stranger))["webhooks"] == []
    failed(app.write("redeliver-webhook", {"deliveryId": "nope"}, admin), "not_found", 404)


def test_bad_urls_and_filters_are_refused(app: App, admin: User) -> None:
    for url in (
        "ftp://127.0.0.1/x",
        "file:///etc/passwd",
        "http://",
        "http://user:pw@127.0.0.1/",
        "http://127.0.0.1/a b",
        "http://127.0.0.1:99999/",
        "http://127.0.0.1/#frag",
        "javascript:alert(1)",
    ):
        failed(
            app.write("create-webhook", {"url": url, "events": ["*"]}, admin),
            "invalid_payload",
            400,
        )
    for events in ([], ["Message.Received"], ["message.*"], ["x" * 101], ["a"] * 33):
        failed(
            app.write("create-webhook", {"url": "http://127.0.0.1:9/", "events": events}, admin),
            "invalid_payload",
            400,
        )


def test_private_hosts_are_refused_with_the_setting_off(
    make_app: Callable[..., App], admin: User
) -> None:
    strict = make_app(allow_private_hosts=False)
    for url in (
        "http://127.0.0.1:8080/hook",
        "http://10.0.0.5/hook",
        "https://[::1]/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://0.0.0.0/",
        "http://[::ffff:127.0.0.1]/",
    ):
        details = failed(
            strict.write("create-webhook", {"url": url, "events": ["*"]}, admin),
            "host_not_allowed",
            422,
        )
        assert details["setting"] == "TIDINGS_ALLOW_PRIVATE_HOSTS"
    allowed = make_app(allow_private_hosts=True)
    hook = ok(
        allowed.write("create-webhook", {"url": "http://127.0.0.1:9/", "events": ["*"]}, admin)
    )
    failed(
        strict.write(
            "update-webhook", {"webhookId": hook["webhookId"], "url": "http://10.1.2.3/"}, admin
        ),
        "host_not_allowed",
        422,
    )


def test_a_tenant_has_at_most_its_cap_of_webhooks(
    make_app: Callable[..., App], admin: User, tenant: str
) -> None:
    app = make_app(webhook_limit_per_tenant=2)
    payload = {"url": "http://127.0.0.1:9/", "events": ["*"]}
    first = ok(app.write("create-webhook", payload, admin))
    ok(app.write("create-webhook", payload, admin))
    details = failed(app.write("create-webhook", payload, admin), "cap_exceeded", 422)
    assert details == {"capName": "webhooksPerTenant", "limit": 2, "current": 2}
    ok(app.write("update-webhook", {"webhookId": first["webhookId"], "enabled": False}, admin))
    failed(app.write("create-webhook", payload, admin), "cap_exceeded", 422)  # disabled counts
    other = User(id="admin-o", tenant_id=tenant + "-o", roles=admin.roles)
    ok(app.write("create-webhook", payload, other))  # each tenant its own cap
    ok(app.write("delete-webhook", {"webhookId": first["webhookId"]}, admin))
    ok(app.write("create-webhook", payload, admin))  # a deleted webhook frees its place
    assert len(ok(app.query("list-webhooks", {}, admin))["webhooks"]) == 2
    closed = make_app(webhook_limit_per_tenant=0)
    stranger = User(id="s", tenant_id=tenant + "-s", roles=admin.roles)
    failed(closed.write("create-webhook", payload, stranger), "cap_exceeded", 422)


def test_racing_creators_never_pass_the_cap(make_app: Callable[..., App], admin: User) -> None:
    apps = [make_app(webhook_limit_per_tenant=3) for _ in range(4)]  # like four processes
    start = threading.Barrier(len(apps) * 2)
    outcomes: list[str] = []

    def create(app: App) -> None:
        start.wait()
        for _ in range(3):
            result = app.write(
                "create-webhook", {"url": "http://127.0.0.1:9/", "events": ["*"]}, admin
            )
            outcomes.append("ok" if result.error is None else result.error.code)

    threads = [threading.Thread(target=create, args=(app,)) for app in apps for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["cap_exceeded"] * 21 + ["ok"] * 3
    assert len(ok(apps[0].query("list-webhooks", {}, admin))["webhooks"]) == 3
