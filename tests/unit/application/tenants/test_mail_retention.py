"""set-mail-retention and get-mail-retention on fakes: who may set and read, the
operator's default and the tenant's own, bounds at and past their limits, hostile
payloads, and one tenant never seeing another's policy."""

from __future__ import annotations

from typing import Any

import pytest

from application import SYSTEM_TENANT_ID, Result, User
from application.app import App
from application.context import Context, Policy
from domain.mail_retention import MailRetention, MailRetentionSet
from tests.support.results import failed
from tests.unit.application.fakes import FakeEventStore, FakeProjections, FakeReadModel, FixedClock

T1, T2 = "t-one", "t-two"
ADMIN = User("a1", T1, frozenset({"TenantAdmin"}))
MEMBER = User("m1", T1, frozenset({"TenantMember"}))
NOBODY = User("n1", T1, frozenset())
OTHER_ADMIN = User("a2", T2, frozenset({"TenantAdmin"}))
OPERATOR = User("op", SYSTEM_TENANT_ID, frozenset({"SystemAdmin"}))
DEFAULT = MailRetention(bodies_for="1y", messages_for="7y")


def harness(default: MailRetention = DEFAULT) -> tuple[App, FakeEventStore]:
    store = FakeEventStore()
    ctx = Context(
        store=store,
        clock=FixedClock(),
        custom_fields=FakeReadModel(),
        policy=Policy(mail_retention_default=default),
    )
    return App(ctx, FakeProjections(), project_inline=False), store


def set_policy(app: App, policy: Any, user: User = ADMIN) -> Result:
    return app.write("set-mail-retention", {"mailRetention": policy}, user)


def get_policy(app: App, user: User = ADMIN) -> dict[str, Any]:
    result = app.query("get-mail-retention", {}, user)
    assert result.data is not None, result.error
    return result.data


def test_the_default_applies_until_the_tenant_sets_its_own_and_again_after_null() -> None:
    app, store = harness()
    assert get_policy(app, MEMBER) == {
        "mailRetention": {"bodiesFor": "1y", "messagesFor": "7y"},
        "source": "default",
        "default": {"bodiesFor": "1y", "messagesFor": "7y"},
    }
    own = {"bodiesFor": "90d", "messagesFor": None}
    result = set_policy(app, own)
    assert result.data is not None and result.data["mailRetention"] == own
    assert get_policy(app, MEMBER)["source"] == "tenant"
    assert get_policy(app, OTHER_ADMIN)["source"] == "default"  # one tenant's own only
    assert set_policy(app, own).is_success  # unchanged: nothing recorded
    assert set_policy(app, None).is_success
    assert get_policy(app)["source"] == "default"
    recorded = [e for e in store.events if isinstance(e, MailRetentionSet)]
    assert [e.policy for e in recorded] == [own, None]
    assert {e.tenant_id for e in recorded} == {T1}


@pytest.mark.parametrize("user", [MEMBER, NOBODY, OPERATOR])
def test_only_a_tenant_admin_sets_it(user: User) -> None:
    app, store = harness()
    failed(set_policy(app, {"bodiesFor": "30d", "messagesFor": None}, user), "forbidden", 403)
    assert not store.events


def test_a_user_without_roles_reads_nothing() -> None:
    app, _ = harness()
    failed(app.query("get-mail-retention", {}, NOBODY), "forbidden", 403)


@pytest.mark.parametrize(
    "policy",
    [
        {"bodiesFor": "30d", "messagesFor": "30d"},
        {"bodiesFor": "3650d", "messagesFor": "10y"},
        {"bodiesFor": None, "messagesFor": "521w"},
        {"bodiesFor": "1m", "messagesFor": "120m"},
    ],
)
def test_bounds_at_their_limits_are_taken(policy: dict[str, Any]) -> None:
    app, _ = harness()
    assert set_policy(app, policy).is_success


@pytest.mark.parametrize(
    "policy",
    [
        {"bodiesFor": "29d", "messagesFor": None},
        {"bodiesFor": None, "messagesFor": "11y"},
        {"bodiesFor": "3651d", "messagesFor": None},
        {"bodiesFor": "1y", "messagesFor": "30d"},
        {"bodiesFor": "-1d", "messagesFor": None},
        {"bodiesFor": "1y\n", "messagesFor": None},
        {"bodiesFor": "1" * 9 + "d", "messagesFor": None},
        {"bodiesFor": "x" * 100_000, "messagesFor": None},
        {"bodiesFor": 30, "messagesFor": None},
        {"bodiesFor": "30d"},
        {"bodiesFor": "30d", "messagesFor": None, "extra": 1},
        ["30d"],
        "30d",
    ],
)
def test_policies_past_their_bounds_or_misshapen_are_refused(policy: Any) -> None:
    app, store = harness()
    failed(set_policy(app, policy), "invalid_payload", 400)
    assert not store.events


def test_an_operator_default_of_kept_for_ever_reads_as_nulls() -> None:
    app, _ = harness(MailRetention())
    assert get_policy(app)["mailRetention"] == {"bodiesFor": None, "messagesFor": None}
