"""The change feed as a read model: one row per public item, numbered per tenant.

- ``items``: (tenant, sequence) -> item id, type, time, account, data (sealed fields
  still sealed), the log position it came from.
- ``heads``: each tenant's last sequence.

Sequences are gap-free and increasing per tenant because the runner applies batches
in log order, one at a time, each in the transaction that moves its tracking position:
a batch's items and its tenants' new heads commit together, exactly once. A rebuild
replays the same log in the same order, so it assigns the same sequences, and item ids
come from the events themselves.

This module writes them; ``projections.feed_reader`` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from application.feed.items import TOPICS, built, item_id
from application.ports import Dialect, Recorded, SqlCursor
from projections.base import index_name, shadow_tables

TABLES = {"items": "feed_items", "heads": "feed_heads"}

# The JSON text of each tuple of sealed keys (a handful of them, one per item type).
_SEALED_JSON: dict[tuple[str, ...], str] = {}

_COLUMNS = (
    "tenant_id",
    "sequence",
    "item_id",
    "type",
    "occurred_at",
    "account_id",
    "data",
    "sealed",
    "position",
)


class FeedProjection:
    topics = TOPICS  # the runner hands it these events only

    def __init__(self, tables: Mapping[str, str] = TABLES, name: str = "feed") -> None:
        self._tables = dict(tables)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def tables(self) -> Mapping[str, str]:
        return self._tables

    def shadow(self) -> FeedProjection:
        return FeedProjection(shadow_tables(self._tables), name=f"{self._name}__next")

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        items, heads = self._tables["items"], self._tables["heads"]
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {items} (tenant_id TEXT NOT NULL,"
            " sequence BIGINT NOT NULL, item_id TEXT NOT NULL, type TEXT NOT NULL,"
            " occurred_at TEXT NOT NULL, account_id TEXT, data TEXT NOT NULL,"
            " sealed TEXT NOT NULL, position BIGINT NOT NULL,"
            " PRIMARY KEY (tenant_id, sequence))"
        )
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {heads} (tenant_id TEXT PRIMARY KEY,"
            " sequence BIGINT NOT NULL)"
        )
        cur.execute(f"CREATE UNIQUE INDEX {index_name(items, 'item')} ON {items} (item_id)")

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        # The parts of each entry (``entry_of`` without its named tuple: a rebuild makes
        # one per event).
        entries = [
            (recorded, parts) for recorded in batch if (parts := built(recorded.event)) is not None
        ]
        if not entries:
            return
        heads = self._heads(cur, dialect, {r.event.tenant_id for r, _ in entries})  # type: ignore[attr-defined]
        rows = []
        dumps, sealed_json = orjson.dumps, _SEALED_JSON
        for recorded, (kind, account_id, data, sealed_keys) in entries:
            event = recorded.event
            tenant: str = event.tenant_id  # type: ignore[attr-defined]
            heads[tenant] = sequence = heads.get(tenant, 0) + 1
            sealed = sealed_json.get(sealed_keys)
            if sealed is None:
                sealed = sealed_json[sealed_keys] = dumps(sealed_keys).decode()
            rows.append(
                (
                    tenant,
                    sequence,
                    item_id(event),
                    kind,
                    event.timestamp.isoformat(),
                    account_id,
                    dumps(data).decode(),
                    sealed,
                    recorded.position,
                )
            )
        items, head_rows = self._tables["items"], sorted(heads.items())
        # PostgreSQL: one COPY, the cheapest bulk insert. (``CopiesRows`` asked by its
        # method: a protocol's isinstance walks its members, per batch.)
        copy_rows = getattr(cur, "copy_rows", None)
        if copy_rows is not None:
            copy_rows(items, _COLUMNS, rows)
        else:
            marks = ", ".join("?" * len(_COLUMNS))
            cur.executemany(f"INSERT INTO {items} ({', '.join(_COLUMNS)}) VALUES ({marks})", rows)
        if dialect == "postgresql":  # one statement over arrays
            cur.execute(
                f"INSERT INTO {self._tables['heads']} (tenant_id, sequence)"
                " SELECT * FROM unnest(?::text[], ?::bigint[])"
                " ON CONFLICT (tenant_id) DO UPDATE SET sequence = excluded.sequence",
                [list(column) for column in zip(*head_rows, strict=True)],
            )
            return
        cur.executemany(
            f"INSERT INTO {self._tables['heads']} (tenant_id, sequence) VALUES (?, ?)"
            " ON CONFLICT (tenant_id) DO UPDATE SET sequence = excluded.sequence",
            head_rows,
        )

    def _heads(self, cur: SqlCursor, dialect: Dialect, tenants: set[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        ordered = sorted(tenants)
        if dialect == "postgresql":
            cur.execute(
                f"SELECT tenant_id, sequence FROM {self._tables['heads']}"
                " WHERE tenant_id = ANY(?::text[])",
                (ordered,),
            )
            return {str(tenant): int(seq) for tenant, seq in cur.fetchall()}
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            cur.execute(
                f"SELECT tenant_id, sequence FROM {self._tables['heads']}"
                f" WHERE tenant_id IN ({', '.join('?' * len(chunk))})",
                tuple(chunk),
            )
            found.update((str(tenant), int(seq)) for tenant, seq in cur.fetchall())
        return found
