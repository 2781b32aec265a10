"""An index that tables made before it gain at start-up, exactly once.

Index names are unique per creation (``base.index_name``: a renamed shadow table keeps
its index names), so ``CREATE INDEX IF NOT EXISTS`` with a fresh name never finds the
one made before and adds another at every start. An index is found here by its purpose
instead: ``ix_<table>_<purpose>_<8 hex>``, the table's name being the shadow's where a
rebuild made it.
Copies of it beyond the first (left by starts before this) are dropped.
"""

from __future__ import annotations

import re

from application.ports import Dialect, SqlCursor
from projections.base import SHADOW_SUFFIX, index_name


def ensure_index(
    cur: SqlCursor, dialect: Dialect, table: str, purpose: str, definition: str
) -> None:
    """``CREATE INDEX <name> ON <table> <definition>`` unless the table has an index of
    this purpose; one of it at most afterwards."""
    made = re.compile(
        rf"ix_{re.escape(table)}(?:{re.escape(SHADOW_SUFFIX)})?_{re.escape(purpose)}_[0-9a-f]{{8}}"
    )
    found = [name for name in index_names(cur, dialect, table) if made.fullmatch(name)]
    for extra in sorted(found)[1:]:
        cur.execute(f"DROP INDEX {extra}")
    if not found:
        cur.execute(f"CREATE INDEX {index_name(table, purpose)} ON {table} {definition}")


def index_names(cur: SqlCursor, dialect: Dialect, table: str) -> list[str]:
    """The names of the table's indexes."""
    if dialect == "postgresql":
        cur.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            " AND tablename = ?",
            (table,),
        )
    else:
        cur.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)
        )
    return [str(row[0]) for row in cur.fetchall()]
