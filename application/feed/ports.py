"""What the feed's use cases need from the feed's read model."""

from __future__ import annotations

from typing import Any, Protocol


class FeedReadModel(Protocol):
    def items(self, tenant_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        """Items of one tenant with a sequence above ``after``, in order, sealed fields
        still sealed (listed under ``sealed``)."""
        ...

    def head(self, tenant_id: str) -> int:
        """The tenant's last sequence (0 before its first item)."""
        ...
