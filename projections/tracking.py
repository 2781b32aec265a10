"""The projections' tracking rows: each projection's position in the log, read (and
locked) and written for several projections at once, one statement each way: the
inline catch-up moves every projection once per batch of writes."""

from __future__ import annotations

from collections.abc import Sequence

from application.ports import Dialect, SqlCursor

TRACKING_TABLE = "projection_tracking"


class UnknownProjection(LookupError):
    pass


def locked_positions(cur: SqlCursor, dialect: Dialect, names: Sequence[str]) -> dict[str, int]:
    """Their positions, the rows locked in name order (PostgreSQL locks them as the sort
    returns them; SQLite's write transaction holds the whole database already)."""
    lock = " FOR UPDATE" if dialect == "postgresql" else ""
    cur.execute(
        f"SELECT name, position FROM {TRACKING_TABLE}"
        f" WHERE name IN ({', '.join('?' * len(names))}) ORDER BY name{lock}",
        tuple(names),
    )
    found = {str(name): int(position) for name, position in cur.fetchall()}
    for name in names:
        if name not in found:
            raise UnknownProjection(name)
    return found


def move_positions(cur: SqlCursor, moved: dict[int, list[str]]) -> None:
    """Write the new positions: one statement per position, for the names moved to it."""
    for last, names in moved.items():
        cur.execute(
            f"UPDATE {TRACKING_TABLE} SET position = ?"
            f" WHERE name IN ({', '.join('?' * len(names))})",
            (last, *names),
        )
