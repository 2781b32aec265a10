"""LeaseKeeper: renew cadence, "not yours", errors spanning the ttl, stale acquisitions."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from application.leases import LeaseBackendUnavailable
from infrastructure.in_process.lease import InProcessLease
from workers.policies.lease_keeper import Claim, LeaseKeeper, RenewBatch, Teardown

TTL = 90.0


def hold(keeper: LeaseKeeper, account_id: str, token: str, at: float) -> Claim:
    claim = keeper.claim(account_id)
    assert claim is not None
    assert keeper.on_acquired(claim, token, sent_at=at)
    return claim


def test_acquired_lease_is_held_and_renewed_every_third_of_the_ttl() -> None:
    keeper = LeaseKeeper(TTL)
    hold(keeper, "a", "tok-a", at=0.0)
    assert keeper.holds("a") and len(keeper) == 1
    assert not keeper.due(29.9)
    assert keeper.due(30.0)
    batch = keeper.start_renewal(30.0)
    assert dict(batch.tokens) == {"a": "tok-a"}
    assert not keeper.due(30.0)
    assert keeper.on_renew_results(batch, {"a": True}) == []
    assert keeper.due(60.0)
    # Renewed at 30: valid until 120, given up at 120 - margin (9).
    assert keeper.expired(110.9) == []
    assert keeper.expired(111.0) == [Teardown("a", "expired", "tok-a")]


def test_nothing_is_due_without_leases() -> None:
    keeper = LeaseKeeper(TTL)
    assert not keeper.due(1000.0)
    assert keeper.next_wakeup() is None


def test_renew_answered_not_yours_tears_down_that_watcher_at_once() -> None:
    keeper = LeaseKeeper(TTL)
    hold(keeper, "a", "tok-a", at=0.0)
    hold(keeper, "b", "tok-b", at=0.0)
    batch = keeper.start_renewal(30.0)
    lost = keeper.on_renew_results(batch, {"a": False, "b": True})
    assert lost == [Teardown("a", "lost", "tok-a")]
    assert keeper.held_accounts() == {"b"}


def test_renew_errors_spanning_the_ttl_tear_down_every_watcher() -> None:
    keeper = LeaseKeeper(TTL)
    hold(keeper, "a", "tok-a", at=0.0)
    hold(keeper, "b", "tok-b", at=5.0)
    now = 30.0
    torn: list[Teardown] = []
    while not torn:
        assert keeper.due(now)
        batch = keeper.start_renewal(now)
        torn = keeper.on_renew_failed(batch, now)  # the backend never answers
        if torn:
            break
        wake = keeper.next_wakeup()
        assert wake is not None and wake > now
        now = wake
        torn = keeper.expired(now)
        if torn:
            break
    # "a" was last confirmed at 0: it goes at 90 - 9 = 81, before the backend frees it.
    assert now == pytest.approx(81.0)
    assert torn == [Teardown("a", "expired", "tok-a")]
    assert keeper.expired(85.9) == []
    assert keeper.expired(86.0) == [Teardown("b", "expired", "tok-b")]
    assert len(keeper) == 0


def test_a_failed_renewal_is_retried_sooner_and_a_recovery_keeps_the_lease() -> None:
    keeper = LeaseKeeper(TTL)
    hold(keeper, "a", "tok-a", at=0.0)
    batch = keeper.start_renewal(30.0)
    assert keeper.on_renew_failed(batch, 32.0) == []
    assert not keeper.due(41.9)
    assert keeper.due(42.0)  # 32 + ttl/9
    batch = keeper.start_renewal(42.0)
    assert keeper.on_renew_results(batch, {"a": True}) == []
    assert keeper.expired(100.0) == []  # valid until 132 now
    assert keeper.holds("a")


def test_a_lease_acquired_for_a_stopped_watcher_is_not_kept() -> None:
    keeper = LeaseKeeper(TTL)
    claim = keeper.claim("a")
    assert claim is not None
    assert keeper.stop("a") is None  # nothing held yet
    assert keeper.on_acquired(claim, "tok-a", sent_at=1.0) is False  # release it at once
    assert not keeper.holds("a")


def test_an_older_claim_is_stale_after_a_restart() -> None:
    keeper = LeaseKeeper(TTL)
    old = keeper.claim("a")
    assert old is not None
    keeper.stop("a")
    new = keeper.claim("a")
    assert new is not None and new.generation > old.generation
    assert keeper.on_acquired(old, "tok-old", sent_at=1.0) is False
    assert keeper.on_acquired(new, "tok-new", sent_at=1.0) is True
    assert keeper.stop("a") == "tok-new"


def test_claim_is_refused_while_pending_or_held() -> None:
    keeper = LeaseKeeper(TTL)
    claim = keeper.claim("a")
    assert claim is not None
    assert keeper.claim("a") is None
    assert keeper.pending_accounts() == {"a"}
    keeper.on_acquire_failed(claim)
    assert keeper.pending_accounts() == frozenset()
    hold(keeper, "a", "tok", at=0.0)
    assert keeper.claim("a") is None


def test_renew_answers_count_only_for_the_token_they_were_sent_for() -> None:
    keeper = LeaseKeeper(TTL)
    hold(keeper, "a", "tok-1", at=0.0)
    batch = keeper.start_renewal(30.0)
    # While the batch is in flight the watcher restarts with a fresh lease.
    assert keeper.stop("a") == "tok-1"
    hold(keeper, "a", "tok-2", at=31.0)
    assert keeper.on_renew_results(batch, {"a": False}) == []
    assert keeper.holds("a")


def test_a_lease_acquired_during_a_batch_and_unanswered_keys_are_untouched() -> None:
    keeper = LeaseKeeper(TTL)
    hold(keeper, "a", "tok-a", at=0.0)
    batch = keeper.start_renewal(30.0)
    hold(keeper, "b", "tok-b", at=31.0)
    assert keeper.on_renew_results(batch, {}) == []
    assert keeper.held_accounts() == {"a", "b"}
    assert keeper.expired(81.0) == [Teardown("a", "expired", "tok-a")]


def test_stop_all_returns_every_token_to_release() -> None:
    keeper = LeaseKeeper(TTL)
    hold(keeper, "a", "tok-a", at=0.0)
    hold(keeper, "b", "tok-b", at=0.0)
    assert keeper.stop_all() == {"a": "tok-a", "b": "tok-b"}
    assert len(keeper) == 0


def test_next_wakeup_is_the_earlier_of_renewal_and_expiry() -> None:
    keeper = LeaseKeeper(9.0, margin=0.5)
    hold(keeper, "a", "tok", at=0.0)
    assert keeper.next_wakeup() == pytest.approx(3.0)
    keeper.start_renewal(3.0)  # never answered
    assert keeper.next_wakeup() == pytest.approx(6.0)
    keeper.start_renewal(6.0)
    assert keeper.next_wakeup() == pytest.approx(8.5)


def test_margin_must_leave_room_for_a_renewal() -> None:
    with pytest.raises(ValueError):
        LeaseKeeper(9.0, margin=6.0)
    with pytest.raises(ValueError):
        LeaseKeeper(0)


class FlakyLease:
    """An in-process lease whose renewals can fail, like an unreachable Redis."""

    def __init__(self, inner: InProcessLease) -> None:
        self.inner = inner
        self.down = False

    def renew_many(self, items: Mapping[str, str]) -> dict[str, bool]:
        if self.down:
            raise LeaseBackendUnavailable("down")
        return self.inner.renew_many(items)


class KeeperAgainstAnotherWorker(RuleBasedStateMachine):
    """Safety: whatever the backend does, this worker never holds a lease another worker got.

    One tick = move the clock by at most a tick, tear down what expired, maybe renew.
    Another worker grabs any free key whenever it can."""

    TTL = 3.0
    TICK = 0.3  # the supervisor looks at expiry at least once per margin (ttl/10)

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.store = InProcessLease(self.TTL, clock=lambda: self.now)
        self.flaky = FlakyLease(self.store)
        self.keeper = LeaseKeeper(self.TTL)
        self.others: dict[str, str] = {}

    @rule(account=st.sampled_from("ab"))
    def start_watch(self, account: str) -> None:
        claim = self.keeper.claim(account)
        if claim is None:
            return
        token = self.store.acquire(account)
        if token is None:
            self.keeper.on_acquire_failed(claim)
        elif not self.keeper.on_acquired(claim, token, sent_at=self.now):
            self.store.release(account, token)

    @rule(account=st.sampled_from("ab"))
    def stop_watch(self, account: str) -> None:
        token = self.keeper.stop(account)
        if token is not None:
            self.store.release(account, token)

    def tick(self, dt: float) -> None:
        self.now += dt
        self.keeper.expired(self.now)
        if self.keeper.due(self.now):
            batch = self.keeper.start_renewal(self.now)
            try:
                results = self.flaky.renew_many(batch.tokens)
            except LeaseBackendUnavailable:
                self.keeper.on_renew_failed(batch, self.now)
            else:
                self.keeper.on_renew_results(batch, results)

    @rule(dts=st.lists(st.floats(min_value=0.0, max_value=TICK), max_size=20))
    def ticks(self, dts: list[float]) -> None:
        for dt in dts:
            self.tick(dt)

    @rule(seconds=st.floats(min_value=0.0, max_value=2 * TTL), dt=st.floats(0.01, TICK))
    def outage(self, seconds: float, dt: float) -> None:
        self.flaky.down = True
        for _ in range(int(seconds / dt)):
            self.tick(dt)
        self.flaky.down = False

    @rule(account=st.sampled_from("ab"))
    def other_worker_grabs(self, account: str) -> None:
        token = self.store.acquire(account)
        if token is not None:
            # The backend handed it over: this worker must have given it up already.
            assert not self.keeper.holds(account), f"{account} held by two workers"
            self.others[account] = token

    @rule(account=st.sampled_from("ab"))
    def other_worker_lets_go(self, account: str) -> None:
        token = self.others.pop(account, None)
        if token is not None:
            self.store.release(account, token)


TestKeeperAgainstAnotherWorker = KeeperAgainstAnotherWorker.TestCase
TestKeeperAgainstAnotherWorker.settings = settings(
    max_examples=100, stateful_step_count=20, deadline=None
)


def test_expiry_is_still_found_after_the_earliest_lease_stopped() -> None:
    keeper = LeaseKeeper(9.0, margin=0.5)
    hold(keeper, "a", "tok-a", at=0.0)
    hold(keeper, "b", "tok-b", at=2.0)
    keeper.stop("a")
    assert keeper.next_wakeup() == pytest.approx(3.0)  # the renewal; early is allowed
    assert keeper.expired(8.5) == []  # a's old expiry: b's lease is still good
    assert keeper.expired(10.5) == [Teardown("b", "expired", "tok-b")]
    assert keeper.next_wakeup() is None


class Naive(LeaseKeeper):
    """The keeper's answers from a scan of every held lease, each time."""

    def expired(self, now: float) -> list[Teardown]:
        gone = [a for a, h in self._held.items() if now >= h.valid_until - self.margin]
        return [Teardown(a, "expired", self._held.pop(a).token) for a in gone]

    def next_wakeup(self) -> float | None:
        if not self._held:
            return None
        earliest = min(h.valid_until for h in self._held.values()) - self.margin
        return earliest if self._next_renew_at is None else min(earliest, self._next_renew_at)


class KeeperAgainstAScan(RuleBasedStateMachine):
    """Expiry and wake-ups without a scan per question: the same leases expire at the same
    moments as with one, and the keeper never wakes later than a scan says."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.fast, self.naive = LeaseKeeper(9.0), Naive(9.0)
        self.tokens = iter(range(1_000_000))
        self.batches: list[tuple[RenewBatch, RenewBatch]] = []

    def both(self) -> tuple[LeaseKeeper, LeaseKeeper]:
        return self.fast, self.naive

    @rule(account=st.sampled_from("abcd"))
    def acquire(self, account: str) -> None:
        token = f"t{next(self.tokens)}"
        for keeper in self.both():
            claim = keeper.claim(account)
            if claim is not None:
                keeper.on_acquired(claim, token, sent_at=self.now)

    @rule(account=st.sampled_from("abcd"))
    def stop(self, account: str) -> None:
        assert self.fast.stop(account) == self.naive.stop(account)

    @rule()
    def send_renewal(self) -> None:
        self.batches.append((self.fast.start_renewal(self.now), self.naive.start_renewal(self.now)))

    @rule(data=st.data())
    def answer_renewal(self, data: st.DataObject) -> None:
        if not self.batches:
            return
        pair = self.batches.pop(0)
        answers = data.draw(st.dictionaries(st.sampled_from("abcd"), st.booleans()))
        lost = [
            keeper.on_renew_results(batch, answers)
            for keeper, batch in zip(self.both(), pair, strict=True)
        ]
        assert lost[0] == lost[1]

    @rule(dt=st.floats(min_value=0.0, max_value=5.0))
    def tick(self, dt: float) -> None:
        self.now += dt
        assert self.fast.expired(self.now) == self.naive.expired(self.now)
        fast, naive = self.fast.next_wakeup(), self.naive.next_wakeup()
        assert (fast is None) == (naive is None)
        assert fast is None or naive is None or fast <= naive + 1e-9


TestKeeperAgainstAScan = KeeperAgainstAScan.TestCase
TestKeeperAgainstAScan.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
