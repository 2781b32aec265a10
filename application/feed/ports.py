"""What the feed's use cases need from the feed's read model."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol


class FeedReadModel(Protocol):
    def items(self, tenant_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        """Items of one tenant with a sequence above ``after``, in order, sealed fields
        still sealed (listed under ``sealed``)."""
        ...

    def head(self, tenant_id: str) -> int:
        """The tenant's last sequence (0 before its first item)."""
        ...

    def items_at(self, keys: Collection[tuple[str, int]]) -> list[dict[str, Any]]:
        """The items at these (tenant, sequence) keys, in one read (those that exist)."""
        ...

    def heads(self, tenant_ids: Collection[str]) -> dict[str, int]:
        """The last sequence of each of these tenants that has items."""
        ...
