"""The console in a real ``tidings serve``: sign-in and out, sessions and their bounds,
CSRF, tenants kept apart, the headers on every response, hostile values escaped, an
action, and a live update over server-sent events. Both backends (the module's server)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from application import SYSTEM_TENANT_ID, User
from application.app import App
from application.mail.folder_state import FolderRow, folder_key
from application.mail.state import ErrorKind
from infrastructure.bootstrap import bootstrap
from infrastructure.http.console.headers import CSP
from infrastructure.redis.registry import RedisFleet
from tests.e2e.http.conftest import Server, create_key
from tests.integration.projections.test_quarantine import poison_value
from tests.integration.redis.conftest import REDIS_URL
from tests.support.accounts import connect

HOSTILE = '<script>alert("x")</script>\'"&\x1b[31m\u202e\x07'
FIELD = {"entityName": "contact", "fieldKey": "n", "field": {"type": "number"}}
PAGES = ["/console/accounts", "/console/webhooks", "/console/outbox"]


@pytest.fixture(scope="module")
def local_app(settings: dict[str, str]) -> Iterator[App]:
    """The module's app, allowed to name loopback IMAP hosts (never dialled: no verify)."""
    app = bootstrap(None, allow_private_hosts=True, **settings)
    yield app
    app.close()


def _tenant() -> str:
    return "t-" + uuid.uuid4().hex[:8]


def admin_of(tenant: str) -> User:
    return User(id="admin-" + tenant, tenant_id=tenant, roles=frozenset({"TenantAdmin"}))


def status_of(app: App, user: User, account_id: str) -> str:
    app.projections.catch_up()
    result = app.query("list-mail-accounts", {}, user)
    assert result.data is not None
    return str(next(a["status"] for a in result.data["items"] if a["accountId"] == account_id))


def browser(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=10.0, follow_redirects=False)


def sign_in(http: httpx.Client, key: str) -> httpx.Response:
    return http.post("/console/sign-in", data={"key": key})


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


def assert_console_headers(response: httpx.Response) -> None:
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["cache-control"] == "no-store"


@pytest.fixture
def tenant_key(local_app: App) -> tuple[str, User]:
    admin = admin_of(_tenant())
    return create_key(local_app, admin, "TenantAdmin"), admin


def test_sign_in_sets_a_strict_session_cookie_and_sign_out_ends_it(
    server: Server, tenant_key: tuple[str, User]
) -> None:
    key, _ = tenant_key
    with browser(server) as http:
        assert http.get("/console/accounts").headers["location"] == "/console/sign-in"
        signed = sign_in(http, key)
        assert signed.status_code == 303 and signed.headers["location"] == "/console/accounts"
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
        assert "Secure" not in cookie  # plain HTTP on loopback; over TLS it is set
        page = http.get("/console/accounts")
        assert page.status_code == 200 and "Mail accounts" in page.text
        session = http.cookies["tidings_console"]
        out = http.post("/console/sign-out", data={"csrf": csrf_of(page)})
        assert out.status_code == 303 and out.headers["location"] == "/console/sign-in"
        http.cookies.set("tidings_console", session, path="/console")
        assert http.get("/console/accounts").status_code == 303  # the old id is dead


@pytest.mark.parametrize("key", ["", "not-a-key", "tdk_" + "0" * 32 + "_" + "a" * 43, "x" * 20_000])
def test_a_wrong_key_is_refused_with_401(server: Server, key: str) -> None:
    with browser(server) as http:
        refused = sign_in(http, key)
        assert refused.status_code in (401, 413)
        assert "tidings_console" not in refused.headers.get("set-cookie", "")
        assert_console_headers(refused)


def test_forms_without_the_sessions_csrf_token_are_403(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    key, admin = tenant_key
    account = connect(local_app, admin)
    with browser(server) as http:
        sign_in(http, key)
        page = http.get("/console/accounts")
        for data in ({}, {"csrf": "forged"}, {"csrf": csrf_of(page) + "x"}):
            acted = http.post(f"/console/accounts/{account}/disconnect", data=data)
            assert acted.status_code == 403, acted.text
            assert http.post("/console/sign-out", data=data).status_code == 403
        assert status_of(local_app, admin, account) == "active"
        # Another session's token is no better than a forged one.
        with browser(server) as other:
            sign_in(other, key)
            theirs = csrf_of(other.get("/console/accounts"))
        acted = http.post(f"/console/accounts/{account}/disconnect", data={"csrf": theirs})
        assert acted.status_code == 403
        assert status_of(local_app, admin, account) == "active"


def test_actions_run_the_handlers_as_the_key(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    key, admin = tenant_key
    account = connect(local_app, admin)
    with browser(server) as http:
        sign_in(http, key)
        csrf = csrf_of(http.get("/console/accounts"))
        back = f"/console/accounts/{account}"
        done = http.post(
            f"/console/accounts/{account}/disconnect", data={"csrf": csrf, "back": back}
        )
        assert done.status_code == 303 and done.headers["location"] == back
        assert status_of(local_app, admin, account) == "disconnected"
        assert "Disconnected." in http.get(back).text
        refused = http.post(f"/console/accounts/{account}/sync", data={"csrf": csrf})
        assert refused.status_code == 422  # the handler's answer: reconnect it first
        elsewhere = http.post(
            f"/console/accounts/{account}/reconnect",
            data={"csrf": csrf, "back": "https://evil.example/"},
        )
        assert elsewhere.headers["location"] == "/console/accounts"  # never another site
        assert status_of(local_app, admin, account) == "active"


def test_a_tenant_admin_neither_sees_nor_acts_on_another_tenants_account(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    key, _ = tenant_key
    other = admin_of(_tenant())
    theirs = connect(local_app, other, "Theirs")
    with browser(server) as http:
        sign_in(http, key)
        page = http.get("/console/accounts")
        assert theirs not in page.text and "Theirs" not in page.text
        assert http.get(f"/console/accounts/{theirs}").status_code == 404
        for action in ("disconnect", "reconnect", "sync"):
            acted = http.post(f"/console/accounts/{theirs}/{action}", data={"csrf": csrf_of(page)})
            assert acted.status_code == 404, acted.text
        assert http.get("/console/projections").status_code == 403
        assert http.get("/console/fleet").status_code == 403
        assert http.get("/console/tenants").status_code == 403
        assert "/console/fleet" not in page.text  # no link to what it may not see
    assert status_of(local_app, other, theirs) == "active"


def test_every_console_response_carries_the_security_headers(
    server: Server, tenant_key: tuple[str, User]
) -> None:
    key, _ = tenant_key
    with browser(server) as http:
        for path in ["/console", "/console/sign-in", "/console/static/console.js"]:
            assert_console_headers(http.get(path))
        assert_console_headers(http.get("/console/static/nothing.js"))
        assert_console_headers(sign_in(http, key))
        for path in [*PAGES, "/console/accounts/nope", "/console/projections"]:
            response = http.get(path)
            assert_console_headers(response)
            assert "<script>" not in response.text  # only the one same-origin file
            assert "style=" not in response.text
        script = http.get("/console/static/console.js")
        assert script.headers["content-type"].startswith("text/javascript")


def test_an_accounts_page_draws_its_timeline(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    key, admin = tenant_key
    account = connect(local_app, admin, "Timeline")
    now = datetime.now(UTC)
    state = local_app.ctx.mail.state
    state.record_synced({account: None}, now - timedelta(hours=3))
    state.record_synced({account: None}, now - timedelta(hours=1))
    state.record_failure(account, ErrorKind.THROTTLED, now - timedelta(hours=1))
    with browser(server) as http:
        sign_in(http, key)
        page = http.get(f"/console/accounts/{account}")
    assert page.status_code == 200
    assert '<svg class="chart timeline"' in page.text
    assert "2 syncs · 1 failures" in page.text and "failed: throttled: 1" in page.text


def test_hostile_values_are_rendered_escaped(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    """A display name, a folder name, a subject, a webhook's description and a
    quarantined event's tenant and error, each hostile, some 10 KB long."""
    key, admin = tenant_key
    account = connect(local_app, admin, HOSTILE, smtp=True)
    now = datetime.now(UTC)
    folders = local_app.ctx.mail.folders
    assert folders is not None
    folder = FolderRow(account, folder_key(account, None, "x"), HOSTILE * 500, role=HOSTILE)
    folders.save_listing(account, [folder], [], now)
    folders.record_failure(account, folder.folder_key, ErrorKind.ERROR, now)
    subject = HOSTILE.replace("\x07", "") * 27  # one line of 972 characters
    queued = local_app.write(
        "send-message",
        {
            "accountId": account,
            "to": ["to@mail.example"],
            "subject": subject,
            "text": "hi",
            "idempotencyKey": uuid.uuid4().hex,
        },
        admin,
    )
    assert queued.is_success, queued.error
    hook = local_app.write(
        "create-webhook",
        {"url": "https://hooks.example/x", "events": ["*"], "description": HOSTILE * 13},
        admin,
    )
    assert hook.is_success, hook.error
    local_app.projections.catch_up()
    with browser(server) as http:
        sign_in(http, key)
        pages = [
            http.get("/console/accounts"),
            http.get(f"/console/accounts/{account}"),
            http.get("/console/accounts", params={"q": HOSTILE * 300}),
            http.get("/console/webhooks"),
            http.get("/console/outbox"),
        ]
    for page in pages:
        assert page.status_code == 200
        assert "<script>alert" not in page.text
        assert "\x00" not in page.text and "\x1b" not in page.text and "\u202e" not in page.text
    escaped = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&#39;&#34;&amp;"
    assert escaped in pages[0].text  # the display name
    assert pages[1].text.count(escaped) >= 3  # the name, the folder (table and chart)
    assert escaped in pages[3].text and escaped in pages[4].text  # description, subject
    assert "\u2026" in pages[4].text and pages[1].text.count("\u2026") >= 2  # cut to 200


def test_a_hostile_quarantined_event_is_shown_escaped(server: Server, local_app: App) -> None:
    tenant = "t-" + uuid.uuid4().hex[:6] + HOSTILE.replace("\x07", "")
    position = poison_value(local_app, tenant, "h1", "1" + "0" * 400)
    local_app.projections.catch_up()
    system = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
    with browser(server) as http:
        sign_in(http, create_key(local_app, system, "SystemAdmin"))
        page = http.get("/console/projections")
    assert page.status_code == 200 and f"/{position}/retry" in page.text
    assert "<script>alert" not in page.text and "\u202e" not in page.text
    assert "&lt;script&gt;alert(&#34;x&#34;)" in page.text


def test_sessions_are_bounded_per_key_and_end_when_the_key_is_revoked(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    key, admin = tenant_key
    clients = [browser(server) for _ in range(6)]
    try:
        for http in clients:
            assert sign_in(http, key).status_code == 303
        # Five sessions per key: the sixth sign-in ended the oldest.
        assert clients[0].get("/console/accounts").status_code == 303
        assert all(c.get("/console/accounts").status_code == 200 for c in clients[1:])
        key_id = key.split("_")[1]
        assert local_app.write("revoke-api-key", {"apiKeyId": key_id}, admin).is_success
        assert all(c.get("/console/accounts").status_code == 303 for c in clients[1:])
    finally:
        for http in clients:
            http.close()


def read_events(response: httpx.Response, until: float) -> Iterator[tuple[str, str]]:
    event = ""
    for line in response.iter_lines():
        if time.monotonic() > until:
            return
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, line[6:]


def test_a_change_reaches_the_live_stream_within_two_seconds(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    key, admin = tenant_key
    account = connect(local_app, admin)
    with browser(server) as http:
        sign_in(http, key)
        page = http.get("/console/accounts")
        assert f"/console/events?view=accounts&amp;ids={account}" in page.text
        url = f"/console/events?view=accounts&ids={account}"
        with http.stream("GET", url) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = read_events(stream, time.monotonic() + 10)
            kind, first = next(events)
            assert kind == "update" and f'"{account}.status":"active"' in first
            changed_at = time.monotonic()
            assert local_app.write("disconnect-mail-account", {"accountId": account}, admin)
            local_app.projections.catch_up()
            for kind, data in events:
                if f'"{account}.status":"disconnected"' in data:
                    break
            else:
                pytest.fail("the change never reached the stream")
            delay = time.monotonic() - changed_at
            assert delay <= 2.0, delay
            # Three streams a session: a fourth is refused while these are open.
            opened = [http.stream("GET", url) for _ in range(2)]
            responses = [o.__enter__() for o in opened]
            try:
                assert all(r.status_code == 200 for r in responses)
                assert http.get(url).status_code == 429
            finally:
                for o in opened:
                    o.__exit__(None, None, None)


def test_the_stream_ends_with_its_session(server: Server, tenant_key: tuple[str, User]) -> None:
    key, _ = tenant_key
    with browser(server) as http:
        sign_in(http, key)
        csrf = csrf_of(http.get("/console/accounts"))
        with http.stream("GET", "/console/events?view=accounts") as stream:
            events = read_events(stream, time.monotonic() + 10)
            with browser(server) as same:
                same.cookies.set(
                    "tidings_console", http.cookies["tidings_console"], path="/console"
                )
                assert same.post("/console/sign-out", data={"csrf": csrf}).status_code == 303
            kinds = [kind for kind, _ in events]
        assert kinds[-1] == "end"


def test_the_system_admin_sees_the_read_models_and_retries_a_quarantined_event(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    tenant_admin_key, admin = tenant_key
    assert local_app.write("define-tenant-field", FIELD, admin).is_success
    position = poison_value(local_app, admin.tenant_id, "h1", "1" + "0" * 400)
    local_app.projections.catch_up()
    system = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
    key = create_key(local_app, system, "SystemAdmin")
    with browser(server) as http:
        sign_in(http, key)
        page = http.get("/console/projections")
        assert page.status_code == 200
        assert "Lag per read model" in page.text and "<svg" in page.text
        names: list[Any] = [s.name for s in local_app.projections.status()]
        assert all(name in page.text for name in names)
        retry = f"/console/projections/custom_fields/{position}/retry"
        assert f'action="{retry}"' in page.text and "UnreadableEvent" in page.text
        assert http.post(retry, data={}).status_code == 403  # no CSRF token
        done = http.post(retry, data={"csrf": csrf_of(page)})
        assert done.status_code == 303
        assert "failed again" in http.get("/console/projections").text  # still unreadable
        missing = f"/console/projections/custom_fields/{10**12}/retry"
        assert http.post(missing, data={"csrf": csrf_of(page)}).status_code == 404
    with browser(server) as tenant:
        sign_in(tenant, tenant_admin_key)
        csrf = csrf_of(tenant.get("/console/accounts"))
        assert tenant.post(retry, data={"csrf": csrf}).status_code == 403
    assert position in {q.position for q in local_app.projections.quarantined("custom_fields")}


def test_the_system_admin_sees_every_tenants_health_without_names(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    _, admin = tenant_key
    connect(local_app, admin, "Very private name")
    system = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
    with browser(server) as http:
        sign_in(http, create_key(local_app, system, "SystemAdmin"))
        page = http.get("/console/tenants")
    assert page.status_code == 200
    assert admin.tenant_id in page.text and "Very private name" not in page.text


def test_the_fleet_page_shows_the_workers_heartbeats_live(
    start_server: Callable[..., Server], server: Server, local_app: App
) -> None:
    system = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))
    key = create_key(local_app, system, "SystemAdmin")
    with browser(server) as http:  # no Redis: no fleet registry, and no made-up fleet
        sign_in(http, key)
        alone = http.get("/console/fleet")
    assert alone.status_code == 200 and "No fleet registry" in alone.text
    with_redis = start_server(redis_url=REDIS_URL)
    worker = "w-" + uuid.uuid4().hex[:8]
    heartbeats = RedisFleet.from_url(REDIS_URL, worker, ttl_seconds=30.0)
    try:
        heartbeats.heartbeat(7, login_rate=3.25)
        with browser(with_redis) as http:
            sign_in(http, key)
            page = http.get("/console/fleet")
            assert page.status_code == 200
            assert worker in page.text and "Accounts per worker" in page.text
            assert f'data-live="{worker}.accounts">7<' in page.text
            with http.stream("GET", "/console/events?view=fleet") as stream:
                events = read_events(stream, time.monotonic() + 10)
                assert f'"{worker}.accounts":"7"' in next(events)[1]
                heartbeats.heartbeat(9, login_rate=4.0)
                assert any(f'"{worker}.accounts":"9"' in data for _, data in events)
    finally:
        heartbeats.leave()
        heartbeats.close()


def test_lists_come_in_pages_with_filters_kept(
    server: Server, local_app: App, tenant_key: tuple[str, User]
) -> None:
    key, admin = tenant_key
    ids = [connect(local_app, admin, f"Paged {n:02}") for n in range(53)]
    assert local_app.write("disconnect-mail-account", {"accountId": ids[7]}, admin).is_success
    local_app.projections.catch_up()
    rows = re.compile(r'data-live="[^"]+\.status"')
    with browser(server) as http:
        sign_in(http, key)
        first = http.get("/console/accounts")
        assert len(rows.findall(first.text)) == 50 and "1\u201350 of 53" in first.text
        assert 'href="/console/accounts?page=1" rel="next"' in first.text
        second = http.get("/console/accounts?page=1")
        assert len(rows.findall(second.text)) == 3 and "51\u201353 of 53" in second.text
        beyond = http.get("/console/accounts?page=999999")  # the last page, not an empty one
        assert len(rows.findall(beyond.text)) == 3
        for junk in ("-1", "x", "9" * 40):
            assert http.get(f"/console/accounts?page={junk}").status_code == 200
        found = http.get("/console/accounts", params={"q": "paged 0", "status": "active"})
        assert len(rows.findall(found.text)) == 9  # Paged 00..09 but 07, disconnected
        # The counts by status are the tenant's, not the page's.
        assert 'data-live="summary.disconnected">1<' in found.text
        kept = http.get("/console/accounts", params={"q": "paged", "status": "active"})
        assert "/console/accounts?q=paged&amp;status=active&amp;page=1" in kept.text
