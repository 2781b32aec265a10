"""What a read-model processor provides to the runner.

A projection owns a few tables. Its table names are a ``Tables`` mapping so that a
rebuild can build the same tables under shadow names, beside the serving ones, and
swap them in when it has caught up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol
from uuid import uuid4

from application.ports import Dialect, Recorded, SqlCursor

SHADOW_SUFFIX = "__next"


class Projection(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def tables(self) -> Mapping[str, str]:
        """Role -> actual table name."""
        ...

    def shadow(self) -> Projection:
        """The same projection writing to shadow tables (for rebuilds)."""
        ...

    def create(self, cur: SqlCursor, dialect: Dialect) -> None: ...

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        """Apply the batch in order; events of no interest are simply passed over."""
        ...


def shadow_tables(tables: Mapping[str, str]) -> dict[str, str]:
    return {role: name + SHADOW_SUFFIX for role, name in tables.items()}


def index_name(table: str, purpose: str) -> str:
    # Unique per creation: a renamed shadow table keeps its index names, so a fixed
    # name would collide with the next rebuild's shadow index.
    return f"ix_{table}_{purpose}_{uuid4().hex[:8]}"
