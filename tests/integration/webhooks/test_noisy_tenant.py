"""One tenant cannot delay another's webhooks, on both backends, with real receivers on
loopback: a tenant's webhooks, as many as its cap allows, at one silent host or at as
many silent hosts, and the same again under new ids after deleting them, leave another
tenant's healthy webhook receiving its item within ``BOUND`` seconds (a silent attempt
holds its thread for ``timeout``, 4 s: before attempts were counted per host and per
tenant, the healthy item waited that long). The silent host never has more than
``PER_HOST`` attempts open at once, and the tenant's many hosts no more than its share
of the fast pool."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from application import User
from application.app import App
from tests.integration.webhooks.helpers import FAST, create_webhook, define_fields, delivering
from tests.support.results import failed, ok
from tests.support.webhook_receiver import Receiver, SilentHost
from workers.policies.webhook_lanes import LaneSettings

CAP = 10  # the noisy tenant's webhooks (its cap), more than the fast pool's threads
PER_HOST, PER_TENANT = 2, 3
SETTINGS = replace(
    FAST,
    timeout=4.0,  # a silent attempt holds its thread this long
    lanes=LaneSettings(
        fast_pool=8, slow_pool=4, per_host=PER_HOST, per_tenant=PER_TENANT, slow_after=0.5
    ),
)
BOUND = 2.0  # seconds from the healthy tenant's write to its receiver


def other_tenant(admin: User, tenant: str) -> User:
    return User(id="admin-b", tenant_id=tenant + "-b", roles=admin.roles)


def delay_of_next_item(app: App, tenant_b: User, healthy: Receiver, round_: int) -> float:
    """Seconds from tenant B's write of one item to its receiver getting it."""
    started = time.time()
    define_fields(app, tenant_b, 1, prefix=f"b{round_}_")
    got = healthy.wait_for(round_ + 1, timeout=15)
    return got[-1].at - started


def recreate(app: App, admin: User, urls: list[str]) -> None:
    """Delete the tenant's webhooks and create them again, up to its cap, at ``urls``."""
    for hook in ok(app.query("list-webhooks", {}, admin))["webhooks"]:
        ok(app.write("delete-webhook", {"webhookId": hook["webhookId"]}, admin))
    for url in urls:
        create_webhook(app, admin, url)
    more = app.write("create-webhook", {"url": urls[0], "events": ["*"]}, admin)
    assert failed(more, "cap_exceeded", 422)["limit"] == CAP


def test_many_webhooks_at_one_silent_host_do_not_delay_another_tenant(
    make_app: Callable[..., App], admin: User, tenant: str
) -> None:
    app = make_app(webhook_limit_per_tenant=CAP)
    host = SilentHost()
    healthy = Receiver()
    tenant_b = other_tenant(admin, tenant)
    create_webhook(app, tenant_b, healthy.url)
    delays = []
    try:
        with delivering(app, SETTINGS):
            for round_ in range(2):  # the second time under new ids
                recreate(app, admin, [f"{host.url}?n={n}" for n in range(CAP)])
                seen = host.accepted
                define_fields(app, admin, 1, prefix=f"a{round_}_")
                host.wait_accepted(seen + 1)  # the noisy tenant's attempts are under way
                delays.append(delay_of_next_item(app, tenant_b, healthy, round_))
    finally:
        host.stop()
    assert max(delays) <= BOUND, delays
    assert host.max_open <= PER_HOST  # counted per host, whatever the webhook ids


def test_many_webhooks_at_many_silent_hosts_do_not_delay_another_tenant(
    make_app: Callable[..., App], admin: User, tenant: str
) -> None:
    app = make_app(webhook_limit_per_tenant=CAP)
    healthy = Receiver()
    tenant_b = other_tenant(admin, tenant)
    create_webhook(app, tenant_b, healthy.url)
    delays = []
    hosts: list[SilentHost] = []
    try:
        with delivering(app, SETTINGS):
            for round_ in range(2):  # the second time under new ids, at hosts never seen
                fresh = [SilentHost() for _ in range(CAP)]
                hosts.extend(fresh)
                recreate(app, admin, [h.url for h in fresh])
                define_fields(app, admin, 1, prefix=f"a{round_}_")
                deadline = time.monotonic() + 10
                while not any(h.accepted for h in fresh) and time.monotonic() < deadline:
                    time.sleep(0.02)
                delays.append(delay_of_next_item(app, tenant_b, healthy, round_))
                attempted = sum(1 for h in fresh if h.accepted)  # each attempt hangs 4 s
                assert attempted <= PER_TENANT  # the tenant's share of the fast pool
    finally:
        for h in hosts:
            h.stop()
    assert max(delays) <= BOUND, delays
