"""DueScheduler: a heap with rescheduling, cancel and lazy deletion."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.policies.scheduling import DueScheduler, first_poll_at


def test_due_keys_come_out_in_due_order_once() -> None:
    s: DueScheduler[str] = DueScheduler()
    s.schedule("b", 20.0)
    s.schedule("a", 10.0)
    s.schedule("c", 30.0)
    assert s.next_due() == 10.0
    assert s.pop_due(5.0) == []
    assert s.pop_due(20.0) == ["a", "b"]
    assert s.pop_due(20.0) == []
    assert len(s) == 1 and "c" in s and "a" not in s


def test_rescheduling_replaces_and_cancel_removes() -> None:
    s: DueScheduler[str] = DueScheduler()
    s.schedule("a", 10.0)
    assert s.schedule("a", 50.0)
    assert not s.schedule("a", 50.0)
    assert s.due_at("a") == 50.0
    assert s.pop_due(40.0) == []
    assert s.cancel("a") and not s.cancel("a")
    assert s.pop_due(100.0) == [] and s.next_due() is None and s.due_at("a") is None


def test_only_earlier_never_pushes_a_key_out() -> None:
    s: DueScheduler[str] = DueScheduler()
    s.schedule("a", 100.0)
    assert not s.schedule("a", 200.0, only_earlier=True)
    assert s.schedule("a", 5.0, only_earlier=True)  # sync-now: poll it right away
    assert s.due_at("a") == 5.0
    assert s.schedule("b", 7.0, only_earlier=True)  # unscheduled keys are scheduled


def test_ties_pop_in_scheduling_order_and_limit_holds() -> None:
    s: DueScheduler[str] = DueScheduler()
    for key in ["x", "y", "z"]:
        s.schedule(key, 1.0)
    assert s.pop_due(1.0, limit=2) == ["x", "y"]
    assert s.pop_due(1.0) == ["z"]


def test_heap_stays_bounded_under_heavy_rescheduling() -> None:
    s: DueScheduler[int] = DueScheduler()
    for round_ in range(50):
        for key in range(1000):
            s.schedule(key, float(round_ * 1000 + key))
    assert len(s) == 1000
    assert len(s._heap) <= 2 * 1000 + 64 + 1  # inspected only to check compaction
    assert s.pop_due(float("inf"), limit=3) == [0, 1, 2]


ops = st.lists(
    st.tuples(
        st.sampled_from(["schedule", "earlier", "cancel", "pop"]),
        st.integers(0, 9),
        st.integers(0, 100),
    ),
    max_size=200,
)


@settings(max_examples=100, deadline=None)
@given(ops=ops)
def test_behaves_like_a_dict_of_due_times(ops: list[tuple[str, int, int]]) -> None:
    s: DueScheduler[int] = DueScheduler()
    model: dict[int, float] = {}
    for op, key, at in ops:
        if op == "schedule":
            s.schedule(key, float(at))
            model[key] = float(at)
        elif op == "earlier":
            s.schedule(key, float(at), only_earlier=True)
            model[key] = min(model.get(key, float(at)), float(at))
        elif op == "cancel":
            s.cancel(key)
            model.pop(key, None)
        else:
            popped = s.pop_due(float(at))
            expected = {k for k, due in model.items() if due <= at}
            assert set(popped) == expected and len(popped) == len(expected)
            assert [model[k] for k in popped] == sorted(model[k] for k in popped)
            for k in popped:
                del model[k]
        assert len(s) == len(model)
        assert s.next_due() == (min(model.values()) if model else None)


def test_first_polls_are_spread_over_two_seconds_at_a_fixed_offset_per_account() -> None:
    times = [first_poll_at(f"acct-{i}", 100.0) for i in range(500)]
    assert all(100.0 <= t < 102.0 for t in times)
    assert max(times) - min(times) > 1.5  # spread, not bunched
    assert first_poll_at("acct-7", 100.0) == first_poll_at("acct-7", 100.0)
    assert first_poll_at("acct-7", 100.0, spread=10.0) - 100.0 == pytest.approx(
        5 * (first_poll_at("acct-7", 100.0) - 100.0)
    )
