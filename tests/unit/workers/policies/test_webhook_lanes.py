"""LanePolicy: failing or slow endpoints only in the slow lane, remembered by tenant and
host (not by webhook id) in bounded memory; caps on attempts in flight per endpoint,
per tenant in each lane and per lane; the slow lane's turns."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from application.webhooks.delivery_ports import Claimed, Endpoint, Outcome
from application.webhooks.ports import DeliveryRecord
from workers.policies.webhook_lanes import (
    FAST,
    LANES,
    SLOW,
    LaneName,
    LanePlan,
    LanePolicy,
    LaneSettings,
    is_slow,
)

SETTINGS = LaneSettings(fast_pool=8, slow_pool=4, per_host=2, per_tenant=3, slow_after=1.0)
OK = Outcome(200, None, 0.1)
TIMEOUT = Outcome(None, "timeout", 10.0)
HOST = "https://hooks.example.com:443"


def claimed(
    webhook_id: str, sequence: int = 1, *, tenant: str = "t1", destination: str = HOST
) -> Claimed:
    record = DeliveryRecord(
        delivery_id=f"{webhook_id}-{sequence}",
        webhook_id=webhook_id,
        tenant_id=tenant,
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
    return Claimed(record, f"{destination}/{webhook_id}", "sealed", 1, 0.0, destination)


def at(destination: str = HOST, tenant: str = "t1") -> Endpoint:
    return Endpoint(tenant, destination)


def plan_of(policy: LanePolicy) -> LanePlan:
    plan = policy.plan()
    assert plan is not None
    return plan


def made_slow(policy: LanePolicy, item: Claimed, now: float = 0.0) -> None:
    policy.started(item, FAST, now=now)
    policy.finished(item, FAST, TIMEOUT)


def test_an_outcome_is_slow_when_it_failed_or_took_longer_than_slow_after() -> None:
    assert not is_slow(Outcome(204, None, 1.0), 1.0)  # at the limit: still fast
    assert is_slow(Outcome(204, None, 1.01), 1.0)
    assert is_slow(Outcome(None, "timeout", 0.0), 1.0)  # no answer
    assert is_slow(Outcome(500, "HTTP 500", 0.01), 1.0)  # an error status
    assert is_slow(Outcome(302, "redirect not followed", 0.01), 1.0)


def test_the_tenants_share_of_a_lane_is_at_most_half_its_pool() -> None:
    assert [SETTINGS.tenant_share(lane) for lane in LANES] == [3, 2]
    assert LaneSettings(fast_pool=1, slow_pool=1, per_tenant=8).tenant_share(SLOW) == 1
    assert LaneSettings().tenant_share(FAST) == 8 and LaneSettings().tenant_share(SLOW) == 4


def test_a_failing_endpoint_goes_to_the_slow_lane_and_comes_back_after_a_fast_answer() -> None:
    policy = LanePolicy(SETTINGS)
    first = plan_of(policy)
    assert (first.fast.limit, first.slow.limit) == (8, 4)
    assert first.slow.only == set()  # no slow endpoint: the slow lane claims nothing
    made_slow(policy, claimed("w1"), now=10.0)
    assert policy.is_slow(at())
    plan = plan_of(policy)
    assert at() in plan.fast.exclude and plan.slow.only == {at()}
    policy.started(claimed("w1"), SLOW, now=20.0)
    policy.finished(claimed("w1"), SLOW, OK)
    assert not policy.is_slow(at())
    plan = plan_of(policy)
    assert at() not in plan.fast.exclude and plan.slow.only == set()


def test_a_slow_answer_counts_like_a_failure() -> None:
    policy = LanePolicy(SETTINGS)
    policy.started(claimed("w1"), FAST, now=0.0)
    policy.finished(claimed("w1"), FAST, Outcome(200, None, 2.5))
    assert policy.is_slow(at()) and plan_of(policy).slow.only == {at()}


def test_slowness_is_remembered_by_host_so_new_webhook_ids_start_slow() -> None:
    policy = LanePolicy(SETTINGS)
    made_slow(policy, claimed("old"))
    again = claimed("re-created")  # deleted and created again: another id, same host
    assert again.endpoint == at() and policy.is_slow(again.endpoint)
    plan = plan_of(policy)
    assert again.endpoint in plan.fast.exclude and plan.slow.only == {again.endpoint}
    other_path = Claimed(
        again.delivery, f"{HOST}/elsewhere?x=1", "sealed", 1, 0.0, again.destination
    )
    assert policy.is_slow(other_path.endpoint)  # the path does not matter
    assert not policy.is_slow(at("https://hooks.example.com:8443"))  # another port does


def test_a_host_slow_for_one_tenant_is_not_slow_nor_busy_for_another() -> None:
    policy = LanePolicy(SETTINGS)
    made_slow(policy, claimed("w1", tenant="noisy"))  # e.g. a wrong path at a shared host
    policy.started(claimed("w1", 2, tenant="noisy"), SLOW, now=1.0)
    policy.started(claimed("w1", 3, tenant="noisy"), SLOW, now=1.0)
    plan = plan_of(policy)
    assert not policy.is_slow(at(tenant="quiet"))
    assert at(tenant="quiet") not in plan.fast.exclude
    assert plan.quota.admit(LANES.index(FAST), at(tenant="quiet"))
    assert not plan.quota.admit(LANES.index(SLOW), at(tenant="noisy"))  # at its cap


def test_webhooks_at_one_host_share_its_cap_in_both_the_plan_and_the_claim() -> None:
    policy = LanePolicy(SETTINGS)
    quota = plan_of(policy).quota  # one claim: the quota counts what it admits
    assert [quota.admit(0, at()) for _ in range(3)] == [True, True, False]
    policy.started(claimed("w1"), FAST, now=0.0)
    assert at() not in plan_of(policy).fast.exclude
    policy.started(claimed("w2"), FAST, now=0.0)  # another webhook, same host
    plan = plan_of(policy)
    assert at() in plan.fast.exclude and not plan.quota.admit(0, at())
    assert not plan.quota.admit(1, at())  # in either lane
    policy.finished(claimed("w1"), FAST, OK)
    assert at() not in plan_of(policy).fast.exclude
    policy.finished(claimed("w2"), FAST, OK)
    assert policy.remembered() == 0  # nothing left behind


def test_a_tenant_with_many_hosts_has_at_most_its_share_of_each_lane() -> None:
    policy = LanePolicy(SETTINGS)
    hosts = [f"http://h{n}.example:80" for n in range(6)]
    quota = plan_of(policy).quota
    admitted = [quota.admit(0, at(h, "noisy")) for h in hosts]
    assert admitted == [True] * 3 + [False] * 3  # per_tenant: 3
    assert quota.admit(0, at(hosts[0], "quiet"))  # another tenant: its own share
    for n, host in enumerate(hosts[:3]):
        policy.started(claimed(f"w{n}", tenant="noisy", destination=host), FAST, now=0.0)
    plan = plan_of(policy)
    assert plan.fast.exclude_tenants == {"noisy"} and plan.slow.exclude_tenants == set()
    for n, host in enumerate(hosts[3:5]):
        made_slow(policy, claimed(f"s{n}", tenant="noisy", destination=host))
    slow_quota = plan_of(policy).quota
    assert [slow_quota.admit(1, at(h, "noisy")) for h in hosts[3:5]] == [True, True]
    assert not slow_quota.admit(1, at(hosts[5], "noisy"))  # half the slow pool: 2
    for n, host in enumerate(hosts[3:5]):
        policy.started(claimed(f"s{n}", tenant="noisy", destination=host), SLOW, now=1.0)
    assert plan_of(policy).slow.exclude_tenants == {"noisy"}


def test_lanes_fill_up_to_their_pools_and_a_full_worker_claims_nothing() -> None:
    policy = LanePolicy(SETTINGS)
    for n in range(8):
        policy.started(claimed(f"f{n}", tenant=f"t{n}"), FAST, now=0.0)
    plan = plan_of(policy)
    assert (plan.fast.limit, plan.slow.limit) == (0, 4)
    for n in range(4):
        policy.started(claimed(f"s{n}", tenant=f"u{n}"), SLOW, now=0.0)
    assert policy.plan() is None
    policy.finished(claimed("s0", tenant="u0"), SLOW, OK)
    plan = plan_of(policy)
    assert (plan.fast.limit, plan.slow.limit) == (0, 1)
    assert (policy.in_flight(FAST), policy.in_flight(SLOW)) == (8, 3)


def test_the_slow_lane_takes_turns_by_last_claim() -> None:
    policy = LanePolicy(SETTINGS)
    early, late = at("http://early:80"), at("http://late:80")
    made_slow(policy, claimed("a", destination=early.destination), now=5.0)
    made_slow(policy, claimed("b", destination=late.destination), now=9.0)
    turns = plan_of(policy).slow.turns
    assert turns is not None and turns[early] < turns[late]
    policy.started(claimed("a", destination=early.destination), SLOW, now=12.0)
    turns = plan_of(policy).slow.turns
    assert turns is not None and turns[early] > turns[late]  # "late" goes first now


def test_slow_endpoints_are_remembered_up_to_a_bound_least_recently_used_first() -> None:
    policy = LanePolicy(LaneSettings(remembered=3))
    hosts = [f"http://h{n}:80" for n in range(10)]
    for n, host in enumerate(hosts):
        made_slow(policy, claimed(f"w{n}", destination=host), now=float(n))
    assert [h for h in hosts if policy.is_slow(at(h))] == hosts[-3:]
    assert policy.remembered() == 3
    policy.started(claimed("w7", destination=hosts[7]), SLOW, now=20.0)  # used again
    made_slow(policy, claimed("x", destination="http://new:80"), now=21.0)
    assert policy.is_slow(at(hosts[7])) and not policy.is_slow(at(hosts[8]))
    assert policy.remembered() == 3  # the one in flight is also one of the slow ones
    policy.finished(claimed("w7", destination=hosts[7]), SLOW, TIMEOUT)
    assert policy.remembered() == 3


ENDPOINTS = [at(h, t) for t in ("t1", "t2") for h in ("http://a:80", "http://b:80", "http://c:1")]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(ENDPOINTS),
            st.sampled_from([OK, TIMEOUT, Outcome(200, None, 3.0)]),
            st.booleans(),
        ),
        max_size=60,
    ),
    st.integers(min_value=1, max_value=4),
)
def test_caps_and_memory_hold_for_any_sequence_of_attempts(
    attempts: list[tuple[Endpoint, Outcome, bool]], remembered: int
) -> None:
    settings = LaneSettings(
        fast_pool=4, slow_pool=3, per_host=2, per_tenant=2, remembered=remembered
    )
    policy = LanePolicy(settings)
    running: list[tuple[Claimed, LaneName, Outcome]] = []
    for n, (endpoint, outcome, finish) in enumerate(attempts):
        plan = policy.plan()
        if plan is not None:  # start one where the plan and its quota allow it
            lane = SLOW if policy.is_slow(endpoint) else FAST
            share = plan.slow if lane == SLOW else plan.fast
            allowed = share.limit > 0 and endpoint not in share.exclude
            allowed = allowed and endpoint.tenant_id not in share.exclude_tenants
            allowed = allowed and (share.only is None or endpoint in share.only)
            if allowed and plan.quota.admit(LANES.index(lane), endpoint):
                item = claimed(f"w{n}", n, tenant=endpoint.tenant_id, destination=endpoint[1])
                policy.started(item, lane, now=float(n))
                running.append((item, lane, outcome))
        check_caps(policy, settings, running)
        if running and finish:  # finish the oldest now and then
            item, lane, result = running.pop(0)
            policy.finished(item, lane, result)
    for item, lane, result in running:
        policy.finished(item, lane, result)
    assert (policy.in_flight(FAST), policy.in_flight(SLOW)) == (0, 0)
    assert policy.remembered() <= remembered
    final = policy.plan()
    assert final is not None and final.fast.exclude_tenants == set()
    assert all(final.quota.admit(0, e) for e in ENDPOINTS[:2])  # nothing counted behind


def check_caps(
    policy: LanePolicy, settings: LaneSettings, running: list[tuple[Claimed, LaneName, Outcome]]
) -> None:
    assert policy.in_flight(FAST) <= settings.fast_pool
    assert policy.in_flight(SLOW) <= settings.slow_pool
    for endpoint in ENDPOINTS:
        assert sum(1 for c, _, _ in running if c.endpoint == endpoint) <= settings.per_host
    for lane in LANES:
        for tenant in ("t1", "t2"):
            mine = [c for c, name, _ in running if name == lane and c.delivery.tenant_id == tenant]
            assert len(mine) <= settings.tenant_share(lane)
    in_flight = {c.endpoint for c, _, _ in running}
    assert policy.remembered() <= settings.remembered + len(in_flight)
