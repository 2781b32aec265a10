"""The projection quarantine: events a projection could not apply, kept aside.

One row per (projection, position): the tenant the event names (if any), its topic, the
error's class and message. A quarantined event is passed over, so one bad event never
stops a projection for every tenant; a rebuild applies every event again, so what a fix
lets through leaves the table and what still fails is quarantined again (under the
shadow's name during the rebuild, renamed at the swap).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from application.ports import Quarantined, SqlCursor

QUARANTINE_TABLE = "projection_quarantine"
MAX_MESSAGE_CHARS = 2000


__all__ = ["Quarantined"]


def storable(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Text fit for any column: error messages and imported tenant ids may hold NUL or
    lone surrogates, which PostgreSQL refuses."""
    clean = text[:limit].encode("utf-8", "backslashreplace").decode()
    return clean.replace("\x00", "\\x00")


def _first_line(error: BaseException) -> str:
    # Database errors add DETAIL lines that may quote the row's values: the first line
    # says what went wrong without them.
    lines = str(error).splitlines()
    return lines[0] if lines else ""


def create(cur: SqlCursor) -> None:
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {QUARANTINE_TABLE} ("
        " projection TEXT NOT NULL, position BIGINT NOT NULL, tenant_id TEXT,"
        " topic TEXT NOT NULL, error_class TEXT NOT NULL, error_message TEXT NOT NULL,"
        " quarantined_at TEXT NOT NULL, PRIMARY KEY (projection, position))"
    )


def add(
    cur: SqlCursor,
    projection: str,
    *,
    position: int,
    tenant_id: str | None,
    topic: str,
    error: BaseException,
) -> None:
    cur.execute(
        f"INSERT INTO {QUARANTINE_TABLE} (projection, position, tenant_id, topic,"
        " error_class, error_message, quarantined_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (projection, position) DO UPDATE SET error_class = excluded.error_class,"
        " error_message = excluded.error_message, quarantined_at = excluded.quarantined_at",
        (
            projection,
            position,
            None if tenant_id is None else storable(tenant_id, 200),
            storable(topic, 200),
            type(error).__name__,
            storable(_first_line(error)),
            datetime.now(UTC).isoformat(),
        ),
    )


def release(cur: SqlCursor, projection: str, position: int) -> None:
    """The event was applied at last: it leaves the quarantine."""
    cur.execute(
        f"DELETE FROM {QUARANTINE_TABLE} WHERE projection = ? AND position = ?",
        (projection, position),
    )


def held(cur: SqlCursor, projection: str, position: int) -> bool:
    cur.execute(
        f"SELECT 1 FROM {QUARANTINE_TABLE} WHERE projection = ? AND position = ?",
        (projection, position),
    )
    return cur.fetchone() is not None


def forget(cur: SqlCursor, projection: str) -> None:
    cur.execute(f"DELETE FROM {QUARANTINE_TABLE} WHERE projection = ?", (projection,))


def rename(cur: SqlCursor, old: str, new: str) -> None:
    cur.execute(f"UPDATE {QUARANTINE_TABLE} SET projection = ? WHERE projection = ?", (new, old))


def counts(cur: SqlCursor) -> dict[str, int]:
    cur.execute(f"SELECT projection, COUNT(*) FROM {QUARANTINE_TABLE} GROUP BY projection")
    return {str(name): int(count) for name, count in cur.fetchall()}


def listing(cur: SqlCursor, projection: str | None = None, limit: int = 1000) -> list[Quarantined]:
    where = "" if projection is None else " WHERE projection = ?"
    params: tuple[object, ...] = () if projection is None else (projection,)
    cur.execute(
        "SELECT projection, position, tenant_id, topic, error_class, error_message,"
        f" quarantined_at FROM {QUARANTINE_TABLE}{where} ORDER BY projection, position"
        f" LIMIT {int(limit)}",
        params,
    )
    return [
        Quarantined(str(p), int(pos), t, str(topic), str(c), str(m), str(at))
        for p, pos, t, topic, c, m, at in cur.fetchall()
    ]


class QuarantineCollector(Collector):
    """``tidings_projection_quarantined{projection}``, read from the table at each scrape
    so that every process reports the same truth."""

    def __init__(
        self, counts_of: Callable[[], dict[str, int]], names: Callable[[], list[str]]
    ) -> None:
        self._counts_of = counts_of
        self._names = names

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "tidings_projection_quarantined",
            "Events a projection could not apply and set aside",
            labels=["projection"],
        )
        found = self._counts_of()
        for name in self._names():
            gauge.add_metric([name], found.get(name, 0))
        yield gauge
