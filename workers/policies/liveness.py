"""When an idling connection is probed, and when it counts as dead.

Servers differ in what they send during IDLE: some a keepalive every few minutes, some
nothing at all for as long as the mailbox is quiet. So silence alone never means death.
After ``probe_after`` seconds without a word the watch probes the connection (DONE +
IDLE again); only a probe left unanswered for ``probe_timeout`` seconds counts as dead.
A connection whose packets are black-holed is therefore noticed within
``probe_after + probe_timeout`` (plus the timer check's granularity).

Thousands of watches begin IDLE together after a restart or a failover; probed at the
same silence, they would probe in lockstep forever after (each probe resets the
silence). Each probe's silence is drawn anew in ``[1 - spread, 1] * probe_after``:
never later than ``probe_after``, and spread out from the first probe on.

The probe also re-issues IDLE, so an IDLE older than ``reidle_after`` is probed too
(servers end IDLE after 29 minutes).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(enum.Enum):
    WAIT = "wait"
    PROBE = "probe"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class Liveness:
    probe_after: float
    probe_timeout: float
    reidle_after: float
    spread: float = 0.25

    def __post_init__(self) -> None:
        if self.probe_after <= 0 or self.probe_timeout <= 0 or self.reidle_after <= 0:
            raise ValueError("liveness durations must be positive")
        if not 0.0 <= self.spread < 1.0:
            raise ValueError("spread must be in [0, 1)")

    def silence_before_probe(self, draw: float) -> float:
        """The silence that triggers a probe, for a draw in [0, 1)."""
        return self.probe_after * (1.0 - self.spread * min(max(draw, 0.0), 1.0))

    def verdict(
        self,
        now: float,
        *,
        heard_at: float,
        idle_since: float,
        probe_sent_at: float | None,
        draw: float,
    ) -> Verdict:
        if probe_sent_at is not None:
            return Verdict.DEAD if now - probe_sent_at >= self.probe_timeout else Verdict.WAIT
        if now - heard_at >= self.silence_before_probe(draw):
            return Verdict.PROBE
        if now - idle_since >= self.reidle_after:
            return Verdict.PROBE
        return Verdict.WAIT

    @property
    def check_every(self) -> float:
        """How often the watches' timers are checked: fine enough for both bounds."""
        return min(1.0, self.probe_timeout / 4, self.probe_after / 4, self.reidle_after / 4)
