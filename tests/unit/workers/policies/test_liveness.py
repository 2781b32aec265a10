"""The probe policy on a fake clock: silence leads to a probe, never to death; only an
unanswered probe is death; probes of many watches are spread, never later than
``probe_after``."""

from __future__ import annotations

import random

import pytest

from workers.policies.liveness import Liveness, Verdict

POLICY = Liveness(probe_after=240.0, probe_timeout=30.0, reidle_after=25 * 60.0)


def verdict(
    now: float, *, heard: float = 0.0, probe: float | None = None, draw: float = 0.0
) -> Verdict:
    return POLICY.verdict(now, heard_at=heard, idle_since=0.0, probe_sent_at=probe, draw=draw)


def test_silence_is_probed_never_taken_for_death() -> None:
    assert verdict(239.0) is Verdict.WAIT
    assert verdict(240.0) is Verdict.PROBE
    # However long the silence, without a probe in flight the verdict is a probe.
    assert verdict(10_000.0) is Verdict.PROBE


def test_only_an_unanswered_probe_is_death() -> None:
    assert verdict(250.0, probe=240.0) is Verdict.WAIT
    assert verdict(269.9, probe=240.0) is Verdict.WAIT
    assert verdict(270.0, probe=240.0) is Verdict.DEAD


def test_anything_heard_postpones_the_probe() -> None:
    assert verdict(400.0, heard=200.0) is Verdict.WAIT
    assert verdict(440.0, heard=200.0) is Verdict.PROBE


def test_an_old_idle_is_probed_to_reissue_it_before_29_minutes() -> None:
    # Keepalives every minute keep it from being silent; its age still leads to a probe.
    at = 25 * 60.0
    assert (
        POLICY.verdict(at - 1, heard_at=at - 60, idle_since=0.0, probe_sent_at=None, draw=0.0)
        is Verdict.WAIT
    )
    assert (
        POLICY.verdict(at, heard_at=at - 60, idle_since=0.0, probe_sent_at=None, draw=0.0)
        is Verdict.PROBE
    )
    assert POLICY.reidle_after + POLICY.probe_timeout < 29 * 60.0


def test_probes_of_many_watches_are_spread_and_never_late() -> None:
    rng = random.Random(7)
    silences = [POLICY.silence_before_probe(rng.random()) for _ in range(5000)]
    assert max(silences) <= POLICY.probe_after
    assert min(silences) >= POLICY.probe_after * (1 - POLICY.spread)
    # Spread over the whole window: no second of it holds more than a few percent.
    per_second: dict[int, int] = {}
    for s in silences:
        per_second[int(s)] = per_second.get(int(s), 0) + 1
    assert len(per_second) >= 55
    assert max(per_second.values()) < 0.05 * len(silences)


def test_a_black_holed_connection_is_dead_within_probe_after_plus_timeout() -> None:
    # The worst case: heard last at 0, the latest draw, the probe sent when due.
    now, step = 0.0, POLICY.check_every
    probe: float | None = None
    while True:
        v = POLICY.verdict(now, heard_at=0.0, idle_since=0.0, probe_sent_at=probe, draw=0.0)
        if v is Verdict.PROBE:
            probe = now
        elif v is Verdict.DEAD:
            break
        now += step
    assert now <= POLICY.probe_after + POLICY.probe_timeout + 2 * step


@pytest.mark.parametrize("bad", [{"probe_after": 0.0}, {"probe_timeout": -1.0}, {"spread": 1.0}])
def test_nonsense_settings_are_refused(bad: dict[str, float]) -> None:
    args = {"probe_after": 3.0, "probe_timeout": 2.0, "reidle_after": 60.0} | bad
    with pytest.raises(ValueError):
        Liveness(**args)
