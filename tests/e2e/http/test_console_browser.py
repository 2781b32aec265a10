"""The console in Debian's chromium (Playwright): sign-in and out, each page (with a
screenshot as a test artefact; tests/support/browser.py says where), an action, a live
update without a reload, a hostile value left inert, and keyboard use. The module's
``tidings serve``, both backends."""

# The fixtures are imported by name, so each test's ``page`` parameter names one (F811).
# ruff: noqa: F811

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Dialog, Page, expect

from application import SYSTEM_TENANT_ID, User
from application.app import App
from application.mail.state import ErrorKind
from infrastructure.bootstrap import bootstrap
from infrastructure.redis.registry import RedisFleet
from tests.e2e.http.conftest import Server, create_key
from tests.e2e.http.test_console import HOSTILE, admin_of, status_of
from tests.integration.redis.conftest import REDIS_URL
from tests.integration.webhooks.helpers import (
    create_webhook,
    define_fields,
    deliveries,
    delivering,
    eventually,
)
from tests.support.accounts import connect
from tests.support.browser import browser, page, screenshot  # noqa: F401
from tests.support.webhook_receiver import Answer, Receiver


@pytest.fixture(scope="module")
def local_app(settings: dict[str, str]) -> Iterator[App]:
    app = bootstrap(None, allow_private_hosts=True, **settings)
    yield app
    app.close()


def history(app: App, account: str) -> None:
    """A day of syncs (busier in the afternoon), a few failures, tiers reported."""
    state = app.ctx.mail.state
    now = datetime.now(UTC)
    for minutes in range(24 * 60 - 5, -1, -5):  # oldest first: the last sync is now
        at = now - timedelta(minutes=minutes)
        for _ in range(1 + (minutes // 60) % 5):
            state.record_synced({account: None}, at)
        if minutes % 170 == 0:
            state.record_failure(account, ErrorKind.TRANSIENT, at)
    state.record_watches("w-demo", {account: ("idle", "hot")})


def signed_in(page: Page, server: Server, key: str) -> None:
    page.goto(f"{server.url}/console/sign-in")
    page.fill("#key", key)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Mail accounts")


def no_dialogs(page: Page) -> list[str]:
    seen: list[str] = []

    def refuse(dialog: Dialog) -> None:
        seen.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    return seen


def test_sign_in_each_page_and_sign_out(page: Page, server: Server, local_app: App) -> None:
    admin = admin_of("t-" + uuid.uuid4().hex[:8])
    key = create_key(local_app, admin, "TenantAdmin")
    account = connect(local_app, admin, "Sales inbox", smtp=True)
    connect(local_app, admin, "Support inbox")
    for subject in ("Quarterly numbers", "Re: your order 1042"):
        queued = local_app.write(
            "send-message",
            {
                "accountId": account,
                "to": ["buyer@mail.example"],
                "subject": subject,
                "text": "hello",
                "idempotencyKey": uuid.uuid4().hex,
            },
            admin,
        )
        assert queued.is_success, queued.error
    local_app.projections.catch_up()
    local_app.write(
        "create-webhook",
        {"url": "https://hooks.example/in", "events": ["*"], "description": "CRM"},
        admin,
    )
    history(local_app, account)
    page.goto(f"{server.url}/console/sign-in")
    screenshot(page, "sign-in")
    signed_in(page, server, key)
    expect(page.get_by_text("Sales inbox")).to_be_visible()
    screenshot(page, "accounts")
    page.click("text=Sales inbox")
    expect(page.locator("h1")).to_have_text("Sales inbox")
    expect(page.locator("svg.timeline")).to_contain_text("failures")
    screenshot(page, "account")
    page.click("nav >> text=Webhooks")
    expect(page.get_by_text("https://hooks.example/in")).to_be_visible()
    screenshot(page, "webhooks")
    page.click("text=dead")
    expect(page.locator("h1")).to_have_text("Deliveries: dead")
    page.click("nav >> text=Outbox")
    expect(page.locator("h1")).to_have_text("Outbox")
    expect(page.get_by_text("Quarterly numbers")).to_be_visible()
    screenshot(page, "outbox")
    page.click("text=Sign out")
    expect(page.locator("h1")).to_have_text("Sign in")
    page.goto(f"{server.url}/console/accounts/{account}")
    expect(page.locator("h1")).to_have_text("Sign in")


def test_projections_for_the_system_admin(page: Page, server: Server, local_app: App) -> None:
    system = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
    signed_in(page, server, create_key(local_app, system, "SystemAdmin"))
    page.click("nav >> text=Projections")
    expect(page.locator("h1")).to_have_text("Read models")
    screenshot(page, "projections")
    page.click("nav >> text=Tenants")
    expect(page.locator("h1")).to_have_text("Tenants' mail health")
    screenshot(page, "tenants")


def test_the_fleet_page(page: Page, start_server: Callable[..., Server], local_app: App) -> None:
    system = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
    server = start_server(redis_url=REDIS_URL)
    workers = [
        RedisFleet.from_url(REDIS_URL, f"worker-{n}-{uuid.uuid4().hex[:4]}", 30.0) for n in range(3)
    ]
    try:
        for n, worker in enumerate(workers):
            worker.heartbeat(120 + 40 * n, login_rate=2.0 + n)
        signed_in(page, server, create_key(local_app, system, "SystemAdmin"))
        page.click("nav >> text=Fleet")
        expect(page.locator("h1")).to_have_text("Worker fleet")
        cell = page.locator(f'[data-live="{workers[0].worker_id}.accounts"]')
        expect(cell).to_have_text("120")
        screenshot(page, "fleet")
        workers[0].heartbeat(121, login_rate=2.0)
        expect(cell).to_have_text("121", timeout=10_000)  # live, no reload
    finally:
        for worker in workers:
            worker.leave()
            worker.close()


def test_an_action_and_a_live_update_without_a_reload(
    page: Page, server: Server, local_app: App
) -> None:
    admin = admin_of("t-" + uuid.uuid4().hex[:8])
    account = connect(local_app, admin, "Live box")
    signed_in(page, server, create_key(local_app, admin, "TenantAdmin"))
    cell = page.locator(f'[data-live="{account}.status"]')
    expect(cell).to_have_text("active")
    page.click("button[data-action=disconnect]")
    expect(page.locator(".flash")).to_have_text("Disconnected.")
    # On PostgreSQL the read models follow a projection runner's catch-up (here ours).
    assert status_of(local_app, admin, account) == "disconnected"
    expect(cell).to_have_text("disconnected")
    page.wait_for_selector("body[data-live-updated]")  # the stream is open
    page.evaluate("window.notReloaded = true")
    changed = time.monotonic()
    assert local_app.write("reconnect-mail-account", {"accountId": account}, admin).is_success
    local_app.projections.catch_up()
    expect(cell).to_have_text("active", timeout=5000)
    delay = time.monotonic() - changed
    assert page.evaluate("window.notReloaded") is True
    assert delay <= 2.0, delay


def test_a_dead_delivery_is_redelivered_from_the_console(
    page: Page, server: Server, local_app: App
) -> None:
    admin = admin_of("t-" + uuid.uuid4().hex[:8])
    failing = Receiver(lambda _: Answer(status=500))
    hook = create_webhook(local_app, admin, failing.url)
    dialogs = no_dialogs(page)
    with delivering(local_app):
        define_fields(local_app, admin, 1)
        eventually(lambda: len(deliveries(local_app, admin, hook["webhookId"], "dead")) == 1)
        signed_in(page, server, create_key(local_app, admin, "TenantAdmin"))
        page.click("nav >> text=Webhooks")
        page.click("text=dead")
        expect(page.locator("table.deliveries tbody tr")).to_have_count(1)
        expect(page.locator("table.deliveries")).to_contain_text("500")
        screenshot(page, "deliveries")
        failing.behaviour = lambda _: Answer(status=204)
        page.click("button[data-action=redeliver]")
        expect(page.locator(".flash")).to_have_text("Redelivery queued.")
        expect(page.locator("table.deliveries")).to_contain_text("No dead delivery.")
        eventually(lambda: len(deliveries(local_app, admin, hook["webhookId"], "delivered")) == 1)
        page.goto(f"{server.url}/console/webhooks/{hook['webhookId']}?state=delivered")
        expect(page.locator("svg.chart")).to_be_visible()  # the latency chart
    assert dialogs == []


def test_a_hostile_display_name_stays_text(page: Page, server: Server, local_app: App) -> None:
    admin = admin_of("t-" + uuid.uuid4().hex[:8])
    account = connect(local_app, admin, HOSTILE)
    dialogs = no_dialogs(page)
    signed_in(page, server, create_key(local_app, admin, "TenantAdmin"))
    page.goto(f"{server.url}/console/accounts/{account}")
    expect(page.locator("h1")).to_contain_text('<script>alert("x")</script>')
    assert page.locator("script").count() == 1  # the console's own file only
    assert page.evaluate("typeof window.alert") == "function"
    page.wait_for_timeout(300)
    assert dialogs == []


def test_keyboard_reaches_an_action_and_enter_runs_it(
    page: Page, server: Server, local_app: App
) -> None:
    admin = admin_of("t-" + uuid.uuid4().hex[:8])
    account = connect(local_app, admin, "Keyboard box")
    signed_in(page, server, create_key(local_app, admin, "TenantAdmin"))
    page.keyboard.press("Tab")
    skip = page.locator("a.skip")
    expect(skip).to_be_focused()
    page.keyboard.press("Enter")
    for _ in range(40):
        page.keyboard.press("Tab")
        focused = page.evaluate("document.activeElement.getAttribute('data-action')")
        if focused == "disconnect":
            break
    else:
        pytest.fail("Tab never reached the Disconnect button")
    page.keyboard.press("Enter")
    expect(page.locator(".flash")).to_have_text("Disconnected.")
    assert status_of(local_app, admin, account) == "disconnected"
