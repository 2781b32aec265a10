"""TierPolicy: user-active and recent mail make accounts hot; the budget sheds the least active."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workers.policies.tiers import TierPolicy, TierSettings

MIN = 60.0
HOUR = 3600.0
DAY = 86400.0


def test_a_newly_tracked_account_is_warm_then_cold_after_a_quiet_day() -> None:
    tiers = TierPolicy()
    tiers.track("a", 0.0)
    assert tiers.classify(0.0, hot_budget=10) == {"a": "warm"}
    assert tiers.classify(DAY - 1, hot_budget=10) == {"a": "warm"}
    assert tiers.classify(DAY, hot_budget=10) == {"a": "cold"}


def test_user_active_makes_an_account_hot_for_the_inactivity_window() -> None:
    tiers = TierPolicy()
    tiers.on_user_active(["a", "b"], 100.0)
    assert tiers.classify(100.0, hot_budget=10) == {"a": "hot", "b": "hot"}
    assert tiers.classify(100.0 + 30 * MIN - 1, hot_budget=10)["a"] == "hot"
    assert tiers.classify(100.0 + 30 * MIN, hot_budget=10)["a"] == "warm"
    assert tiers.classify(100.0 + DAY, hot_budget=10)["a"] == "cold"


def test_recent_mail_keeps_an_account_hot() -> None:
    tiers = TierPolicy()
    tiers.track("a", 0.0)
    tiers.on_mail("a", 10 * DAY, now=10 * DAY)
    assert tiers.classify(10 * DAY + HOUR - 1, hot_budget=10) == {"a": "hot"}
    assert tiers.classify(10 * DAY + HOUR, hot_budget=10) == {"a": "warm"}


def test_the_budget_sheds_the_least_recently_active() -> None:
    tiers = TierPolicy()
    tiers.on_user_active(["old"], 0.0)
    tiers.on_mail("mid", 60.0, now=60.0)
    tiers.on_user_active(["new"], 120.0)
    assert tiers.classify(130.0, hot_budget=2) == {"old": "warm", "mid": "hot", "new": "hot"}
    assert tiers.classify(130.0, hot_budget=0) == {"old": "warm", "mid": "warm", "new": "warm"}


def test_ties_are_broken_by_account_id() -> None:
    tiers = TierPolicy()
    tiers.on_user_active(["b", "a", "c"], 5.0)
    assert tiers.classify(5.0, hot_budget=2) == {"a": "hot", "b": "hot", "c": "warm"}


def test_times_from_the_future_count_as_now() -> None:
    tiers = TierPolicy()
    tiers.on_mail("a", 10 * DAY, now=0.0)  # a bad Date header
    assert tiers.classify(HOUR - 1, hot_budget=1) == {"a": "hot"}
    assert tiers.classify(HOUR, hot_budget=1) == {"a": "warm"}  # not hot for ten days


def test_activity_only_moves_forward_and_untrack_forgets() -> None:
    tiers = TierPolicy()
    tiers.on_user_active(["a"], 100.0)
    tiers.on_user_active(["a"], 50.0)
    assert tiers.classify(100.0 + 30 * MIN - 1, hot_budget=1) == {"a": "hot"}
    tiers.untrack("a")
    assert tiers.classify(0.0, hot_budget=1) == {}
    assert tiers.tracked() == frozenset()


def test_poll_intervals_per_tier() -> None:
    tiers = TierPolicy(TierSettings(poll_warm=300.0, poll_cold=1800.0))
    assert tiers.poll_interval("hot") == 300.0
    assert tiers.poll_interval("warm") == 300.0
    assert tiers.poll_interval("cold") == 1800.0
    assert tiers.next_poll_at("cold", 1000.0) == 2800.0


events = st.lists(
    st.tuples(st.sampled_from("abcdefgh"), st.booleans(), st.floats(0.0, 3 * HOUR)), max_size=40
)


@settings(max_examples=100, deadline=None)
@given(events=events, now=st.floats(0.0, 4 * HOUR), budget=st.integers(0, 10))
def test_budget_is_respected_and_the_hot_are_the_most_recently_active(
    events: list[tuple[str, bool, float]], now: float, budget: int
) -> None:
    tiers = TierPolicy()
    for account, is_mail, at in events:
        if is_mail:
            tiers.on_mail(account, at, now=at)
        else:
            tiers.on_user_active([account], at)
    result = tiers.classify(now, budget)
    hot = {a for a, tier in result.items() if tier == "hot"}
    assert len(hot) <= budget
    assert result == tiers.classify(now, budget)  # deterministic

    def recency(account: str) -> float:
        times = [min(at, now) for a, is_mail, at in events if a == account]
        return max(times)

    # Every warm account that would qualify as hot is no more recent than any hot one.
    # (The window's edge as the policy reads it: a time later than ``now - window``; the
    # other form, ``now - time < window``, rounds differently at the edge.)
    qualifying = {
        a for a, is_mail, at in events if min(at, now) > now - (HOUR if is_mail else 30 * MIN)
    }
    assert hot <= qualifying
    shed = qualifying - hot
    if shed:
        assert len(hot) == budget
        assert all(recency(s) <= recency(h) for s in shed for h in hot)


def test_learn_takes_shared_times_for_tracked_accounts_only_and_says_when_they_rose() -> None:
    NOW = 10 * DAY
    tiers = TierPolicy()
    tiers.track("a", NOW - 7200)
    tiers.track("b", NOW - 7200)
    assert tiers.classify(NOW, 10) == {"a": "warm", "b": "warm"}
    assert tiers.learn({"a": NOW - 60, "stranger": NOW}, {"b": NOW - 30}, NOW) is True
    assert tiers.tracked() == {"a", "b"}, "an account not tracked is not learnt"
    assert tiers.classify(NOW, 10) == {"a": "hot", "b": "hot"}
    assert tiers.classify(NOW, 1) == {"a": "warm", "b": "hot"}, "the least recent is shed"
    # Older or equal times change nothing (the signal's own times stay).
    assert tiers.learn({"a": NOW - 600}, {"b": NOW - 30}, NOW) is False
    # A time after now counts as now: it cannot keep an account hot beyond its window.
    assert tiers.learn({}, {"a": NOW + 86400}, NOW) is True
    later = NOW + 3600 + 1
    assert tiers.classify(later, 10) == {"a": "warm", "b": "warm"}


def reference_classify(policy: TierPolicy, now: float, hot_budget: int) -> dict[str, str]:
    """The rule as the module docstring states it, written plainly (the policy's own
    loop is tuned for 10,000 accounts a tick)."""
    s = policy.settings
    tiers: dict[str, str] = {}
    candidates = []
    for account_id, a in policy._accounts.items():
        user_active, mail = min(a.user_active, now), min(a.mail, now)
        if now - user_active < s.user_active_window or now - mail < s.recent_mail_window:
            candidates.append((max(user_active, mail), account_id))
            tiers[account_id] = "warm"
        elif now - max(user_active, mail, min(a.seen, now)) < s.warm_window:
            tiers[account_id] = "warm"
        else:
            tiers[account_id] = "cold"
    for _, account_id in sorted(candidates, key=lambda c: (-c[0], c[1]))[: max(hot_budget, 0)]:
        tiers[account_id] = "hot"
    return tiers


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from(["track", "user", "mail"]),
            st.integers(0, 30),
            st.sampled_from([0.0, 1.0, 59.0, 30 * MIN, HOUR, DAY, 2 * DAY, 3 * DAY]),
        ),
        max_size=60,
    ),
    now=st.sampled_from([0.0, 30 * MIN, HOUR, DAY, 1.5 * DAY, 2 * DAY + 1, 4 * DAY]),
    budget=st.integers(-1, 35),
)
def test_classify_agrees_with_the_plain_rule(
    events: list[tuple[str, int, float]], now: float, budget: int
) -> None:
    policy = TierPolicy()
    for kind, account, at in events:
        account_id = f"a{account:02d}"
        if kind == "track":
            policy.track(account_id, at)
        elif kind == "user":
            policy.on_user_active([account_id], at)
        else:
            policy.on_mail(account_id, at, now=at)
    assert policy.classify(now, budget) == reference_classify(policy, now, budget)


def test_the_fleet_budget_is_the_per_worker_budget_for_each_live_worker() -> None:
    tiers = TierPolicy(TierSettings(hot_budget_per_worker=3))
    assert [tiers.hot_budget(workers) for workers in (0, 1, 4)] == [3, 3, 12]
    for account, at in (("a", 100.0), ("b", 200.0), ("c", 300.0), ("d", 400.0)):
        tiers.on_user_active([account], at)
    hot = {a for a, tier in tiers.classify(500.0, tiers.hot_budget(1)).items() if tier == "hot"}
    assert hot == {"b", "c", "d"}  # the most recently active three
    assert set(tiers.classify(500.0, tiers.hot_budget(2)).values()) == {"hot"}
