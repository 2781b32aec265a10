"""The retention sweeper's port: one ``RetentionSweep`` per kind of data that expires
(custom-field values now; mail bodies and messages can join as sweeps of their own).

Contract of ``RetentionSweep.batch(now, after, limit, dry_run)``:

- it finds at most ``limit`` items expired at ``now`` past the cursor ``after`` (None:
  from the start), with one set-based statement over its read model, in a stable
  order, and answers the cursor of the last one (``next``; None when it found fewer
  than ``limit``: the kind is swept);
- without ``dry_run`` it records their expiry events in one append, each only if the
  item's own stream still says it is expired (so a racing sweeper, a sweep restarted
  after a crash, or a read model behind the log records nothing twice);
- ``counts`` says what it found per (tenant, subject, action), whether recorded or not.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


@dataclass
class SweepBatch:
    found: int = 0
    recorded: int = 0
    next: Any = None  # the cursor after this batch; None: nothing more is expired
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)


class RetentionSweep(Protocol):
    @property
    def kind(self) -> str: ...

    def batch(self, now: datetime, after: Any, limit: int, dry_run: bool) -> SweepBatch: ...
