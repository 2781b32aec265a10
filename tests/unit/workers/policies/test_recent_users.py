"""RecentUsers: a user-active remembered for accounts a worker learns of only later."""

from __future__ import annotations

from workers.policies.tiers import NEVER, RecentUsers

WINDOW = 1800.0


def test_a_users_own_accounts_and_its_tenants_shared_ones() -> None:
    recent = RecentUsers(WINDOW)
    recent.seen("t1", "ann", 100.0)
    assert recent.last_active("t1", "ann", shared=False) == 100.0
    assert recent.last_active("t1", "bob", shared=False) == NEVER
    assert recent.last_active("t1", None, shared=True) == 100.0
    assert recent.last_active("t2", "ann", shared=False) == NEVER
    assert recent.last_active("t2", None, shared=True) == NEVER
    assert recent.last_active("t1", None, shared=False) == NEVER  # no owner, not shared


def test_the_latest_activity_counts_and_old_ones_are_pruned() -> None:
    recent = RecentUsers(WINDOW)
    recent.seen("t1", "ann", 100.0)
    recent.seen("t1", "bob", 300.0)
    recent.seen("t1", "ann", 50.0)  # late news never moves a time back
    assert recent.last_active("t1", "ann", shared=False) == 100.0
    assert recent.last_active("t1", None, shared=True) == 300.0
    recent.prune(100.0 + WINDOW)
    assert recent.last_active("t1", "ann", shared=False) == NEVER
    assert recent.last_active("t1", "bob", shared=False) == 300.0
    recent.prune(300.0 + WINDOW)
    assert recent.last_active("t1", None, shared=True) == NEVER
