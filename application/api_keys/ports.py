"""The port of when each API key was last used (not an event: a use is not a change)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol


class KeyUsage(Protocol):
    def touch(self, key_id: str, at: datetime) -> None:
        """Record a use; an adapter may skip writes closer together than a minute."""
        ...

    def last_used(self, key_ids: Iterable[str]) -> dict[str, datetime]:
        """The last recorded use of each key that has one (one round trip)."""
        ...
