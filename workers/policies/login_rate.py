"""How fast this worker logs in, measured from its own logins. Pure: times are passed in.

A login here is a watch's open: from the moment it is asked for (queued behind others
in a flood) until the session is parked or in IDLE (login, EXAMINE, catch-up poll).
The rate is logins completed per second of time during which logins were outstanding.
In a flood (a worker's start, a failover) that is the throughput this machine gives —
what a failover's logins must be planned with; a lone login gives one over its own
duration, less than a flood reaches, so the estimate errs towards starting early.

Both sums decay with a half-life, so the estimate follows the machine (others' load
comes and goes) and, after a long quiet, falls back to "not measured" (``None``): a
caller then takes its safe default. A failed login counts its time, not a completion.
"""

from __future__ import annotations

HALF_LIFE = 600.0  # seconds
MIN_LOGINS = 16.0  # fewer (decayed) completions than this: not measured yet


class LoginRate:
    def __init__(self, half_life: float = HALF_LIFE, min_logins: float = MIN_LOGINS) -> None:
        if half_life <= 0:
            raise ValueError("half_life must be positive")
        self._half_life = half_life
        self._min_logins = min_logins
        self._outstanding = 0
        self._done = 0.0  # decayed completions
        self._busy = 0.0  # decayed seconds with logins outstanding
        self._at: float | None = None

    def started(self, now: float) -> None:
        self._advance(now)
        self._outstanding += 1

    def finished(self, now: float, *, ok: bool) -> None:
        self._advance(now)
        self._outstanding = max(self._outstanding - 1, 0)
        if ok:
            self._done += 1.0

    def per_second(self, now: float) -> float | None:
        """Logins a second, or None while too few were measured (recently)."""
        done, busy = self._decayed(now)
        if done < self._min_logins or busy <= 0:
            return None
        return done / busy

    def _decayed(self, now: float) -> tuple[float, float]:
        if self._at is None:
            return 0.0, 0.0
        elapsed = max(now - self._at, 0.0)
        busy = self._busy + (elapsed if self._outstanding else 0.0)
        decay = 0.5 ** (elapsed / self._half_life)
        return self._done * decay, busy * decay

    def _advance(self, now: float) -> None:
        self._done, self._busy = self._decayed(now)
        if self._at is None or now > self._at:
            self._at = now
