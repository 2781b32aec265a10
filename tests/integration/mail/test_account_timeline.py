"""An account's timeline (both backends): syncs, failures and reported tiers counted per
five-minute bucket beside the mailbox state, old buckets pruned, the query visible to
whoever sees the account and 404 to anyone else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from application import User
from application.app import App
from application.mail.state import ErrorKind
from infrastructure.sql import mailbox_history
from tests.support.accounts import connect
from tests.support.results import ok


def test_syncs_failures_and_tiers_are_counted_per_bucket(app: App, admin: User) -> None:
    account = connect(app, admin, "Timeline box")
    state = app.ctx.mail.state
    now = datetime.now(UTC)
    bucket = datetime.fromtimestamp(mailbox_history.bucket_of(now), UTC)
    earlier = bucket - timedelta(hours=2)
    state.record_synced({account: None}, earlier)
    state.record_synced({account: None}, earlier + timedelta(seconds=10))
    state.record_failure(account, ErrorKind.TRANSIENT, earlier + timedelta(minutes=5))
    state.record_failure(account, ErrorKind.AUTH, earlier + timedelta(minutes=5))
    state.record_watches("w1", {account: ("idle", "hot")})
    state.record_synced({account: None}, now)

    rows = state.timeline(account, now - timedelta(hours=3))
    assert [(r.start, r.kind, r.count) for r in rows] == [
        (int(earlier.timestamp()), "synced", 2),
        (int(earlier.timestamp()) + 300, "failed:auth", 1),
        (int(earlier.timestamp()) + 300, "failed:transient", 1),
        (int(bucket.timestamp()), "synced", 1),
        (int(bucket.timestamp()), "tier:hot", 1),
    ]
    assert state.timeline(account, now - timedelta(hours=1))[0].kind == "synced"

    answer = ok(app.query("get-mail-account-timeline", {"accountId": account, "hours": 3}, admin))
    assert [b["synced"] for b in answer["buckets"]] == [2, 0, 1]
    assert answer["buckets"][1]["failed"] == {"auth": 1, "transient": 1}
    assert answer["buckets"][2]["tiers"] == ["hot"]


def test_old_buckets_are_pruned_and_a_forgotten_account_has_none(app: App, admin: User) -> None:
    account, other = connect(app, admin, "Old"), connect(app, admin, "Other")
    state = app.ctx.mail.state
    now = datetime.now(UTC)
    state.record_synced({account: None, other: None}, now - timedelta(hours=60))
    state.record_synced({other: None}, now)  # a later bucket: the old ones go
    since = now - timedelta(hours=72)
    assert state.timeline(account, since) == []
    assert [r.kind for r in state.timeline(other, since)] == ["synced"]
    state.forget(other)
    assert state.timeline(other, since) == []


def test_the_timeline_is_the_accounts_viewers_only(app: App, admin: User) -> None:
    account = connect(app, admin, "Mine")
    stranger = User(id="x", tenant_id=admin.tenant_id + "-x", roles=frozenset({"TenantAdmin"}))
    for user, payload in (
        (stranger, {"accountId": account}),
        (admin, {"accountId": "not-an-id"}),
        (admin, {"accountId": "00000000-0000-0000-0000-000000000000"}),
    ):
        refused = app.query("get-mail-account-timeline", payload, user)
        assert refused.error is not None and refused.error.status == 404
    too_long = app.query("get-mail-account-timeline", {"accountId": account, "hours": 49}, admin)
    assert too_long.error is not None and too_long.error.status == 400
