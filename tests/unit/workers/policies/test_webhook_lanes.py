"""LanePolicy: failing or slow endpoints only in the slow lane, per-endpoint and per-lane
caps on attempts in flight, and the slow lane's turns."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from application.webhooks.delivery_ports import Claimed, Outcome
from application.webhooks.ports import DeliveryRecord
from workers.policies.webhook_lanes import (
    FAST,
    SLOW,
    LaneName,
    LanePlan,
    LanePolicy,
    LaneSettings,
    is_slow,
)

SETTINGS = LaneSettings(fast_pool=4, slow_pool=2, per_endpoint=2, slow_after=1.0)
OK = Outcome(200, None, 0.1)


def claimed(webhook_id: str, sequence: int = 1) -> Claimed:
    record = DeliveryRecord(
        delivery_id=f"{webhook_id}-{sequence}",
        webhook_id=webhook_id,
        tenant_id="t1",
        sequence=sequence,
        item_id=f"i{sequence}",
        item_type="message.received",
        order_key="a1",
        state="pending",
        attempts=1,
        created_at=0.0,
        next_at=0.0,
        last_status=None,
        last_error=None,
        delivered_at=None,
    )
    return Claimed(record, "https://hooks.example.com/", "sealed", 1, 0.0)


def plan_of(policy: LanePolicy) -> LanePlan:
    plan = policy.plan()
    assert plan is not None
    return plan


def test_an_outcome_is_slow_when_it_failed_or_took_longer_than_slow_after() -> None:
    assert not is_slow(Outcome(204, None, 1.0), 1.0)  # at the limit: still fast
    assert is_slow(Outcome(204, None, 1.01), 1.0)
    assert is_slow(Outcome(None, "timeout", 0.0), 1.0)  # no answer
    assert is_slow(Outcome(500, "HTTP 500", 0.01), 1.0)  # an error status
    assert is_slow(Outcome(302, "redirect not followed", 0.01), 1.0)


def test_a_failing_endpoint_goes_to_the_slow_lane_and_comes_back_after_a_fast_answer() -> None:
    policy = LanePolicy(SETTINGS)
    first = plan_of(policy)
    assert (first.fast.limit, first.slow.limit) == (4, 2)
    assert first.slow.only == set()  # no slow endpoint: the slow lane claims nothing
    policy.started(claimed("w1"), FAST, now=10.0)
    policy.finished(claimed("w1"), FAST, Outcome(None, "timeout", 10.0))
    assert policy.is_slow("w1")
    plan = plan_of(policy)
    assert "w1" in plan.fast.exclude and plan.slow.only == {"w1"}
    policy.started(claimed("w1"), SLOW, now=20.0)
    policy.finished(claimed("w1"), SLOW, OK)
    assert not policy.is_slow("w1")
    plan = plan_of(policy)
    assert "w1" not in plan.fast.exclude and plan.slow.only == set()


def test_a_slow_answer_counts_like_a_failure() -> None:
    policy = LanePolicy(SETTINGS)
    policy.started(claimed("w1"), FAST, now=0.0)
    policy.finished(claimed("w1"), FAST, Outcome(200, None, 2.5))
    assert policy.is_slow("w1") and plan_of(policy).slow.only == {"w1"}


def test_an_endpoint_at_its_cap_is_claimed_in_neither_lane() -> None:
    policy = LanePolicy(SETTINGS)
    policy.started(claimed("w1", 1), FAST, now=0.0)
    plan = plan_of(policy)
    assert "w1" not in plan.fast.exclude and plan.in_flight == {"w1": 1}
    policy.started(claimed("w1", 2), FAST, now=0.0)
    plan = plan_of(policy)
    assert "w1" in plan.fast.exclude and "w1" in plan.slow.exclude
    assert plan.in_flight == {"w1": 2} and plan.per_endpoint == 2
    policy.finished(claimed("w1", 1), FAST, OK)
    assert "w1" not in plan_of(policy).fast.exclude
    policy.finished(claimed("w1", 2), FAST, OK)
    assert plan_of(policy).in_flight == {}  # nothing left behind


def test_a_slow_endpoint_at_its_cap_leaves_the_slow_lanes_candidates() -> None:
    policy = LanePolicy(SETTINGS)
    policy.started(claimed("w1"), FAST, now=0.0)
    policy.finished(claimed("w1"), FAST, Outcome(None, "refused", 0.0))
    policy.started(claimed("w1", 2), SLOW, now=1.0)
    policy.started(claimed("w1", 3), SLOW, now=1.0)
    assert plan_of(policy).slow.only == set()


def test_lanes_fill_up_to_their_pools_and_a_full_worker_claims_nothing() -> None:
    policy = LanePolicy(SETTINGS)
    for n in range(4):
        policy.started(claimed(f"f{n}"), FAST, now=0.0)
    plan = plan_of(policy)
    assert (plan.fast.limit, plan.slow.limit) == (0, 2)
    for n in range(2):
        policy.started(claimed(f"s{n}"), SLOW, now=0.0)
    assert policy.plan() is None
    policy.finished(claimed("s0"), SLOW, OK)
    plan = plan_of(policy)
    assert (plan.fast.limit, plan.slow.limit) == (0, 1)
    assert (policy.in_flight(FAST), policy.in_flight(SLOW)) == (4, 1)


def test_the_slow_lane_takes_turns_by_last_claim() -> None:
    policy = LanePolicy(SETTINGS)
    for webhook_id, at in (("early", 5.0), ("late", 9.0)):
        policy.started(claimed(webhook_id), FAST, now=at)
        policy.finished(claimed(webhook_id), FAST, Outcome(None, "timeout", 1.0))
    turns = plan_of(policy).slow.turns
    assert turns is not None and turns["early"] < turns["late"]
    policy.started(claimed("early"), SLOW, now=12.0)
    turns = plan_of(policy).slow.turns
    assert turns is not None and turns["early"] > turns["late"]  # "late" goes first now


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["w1", "w2", "w3"]),
            st.sampled_from([FAST, SLOW]),
            st.sampled_from([OK, Outcome(None, "timeout", 9.0), Outcome(200, None, 3.0)]),
        ),
        max_size=40,
    )
)
def test_caps_hold_for_any_sequence_of_attempts(
    attempts: list[tuple[str, LaneName, Outcome]],
) -> None:
    policy = LanePolicy(SETTINGS)
    running: list[tuple[Claimed, LaneName, Outcome]] = []
    for n, (webhook_id, _, outcome) in enumerate(attempts):
        plan = policy.plan()
        if plan is not None:  # start one where the plan allows it
            lane = SLOW if policy.is_slow(webhook_id) else FAST
            share = plan.slow if lane == SLOW else plan.fast
            allowed = share.limit > 0 and webhook_id not in share.exclude
            if allowed and (share.only is None or webhook_id in share.only):
                item = claimed(webhook_id, n)
                policy.started(item, lane, now=float(n))
                running.append((item, lane, outcome))
        assert policy.in_flight(FAST) <= SETTINGS.fast_pool
        assert policy.in_flight(SLOW) <= SETTINGS.slow_pool
        assert all(c <= SETTINGS.per_endpoint for c in (plan_of_counts(policy)).values())
        if running and n % 3 == 0:  # finish the oldest now and then
            item, lane, result = running.pop(0)
            policy.finished(item, lane, result)
    for item, lane, result in running:
        policy.finished(item, lane, result)
    assert (policy.in_flight(FAST), policy.in_flight(SLOW)) == (0, 0)
    final = policy.plan()
    assert final is not None and final.in_flight == {}


def plan_of_counts(policy: LanePolicy) -> dict[str, int]:
    plan = policy.plan()
    return {} if plan is None else plan.in_flight
