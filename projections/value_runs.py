"""A run of custom-field value events written to PostgreSQL as two simple statements.

A run is the value events between two definition events: every definition it can name
stands still while it applies. So the run is settled in memory first, in log order:
the values whose definition is live (one small read of the definitions it names), of
those the last per (entity row, key), and per row the keys last set (a JSON object
built from the cells' own JSON text), the keys last cleared, and whether any live value
was set on it (a row that did not exist is created exactly then, as one event after
the other would leave it). The database then does only what needs its indexes: one
``UPDATE`` removing the cleared keys, one upsert merging the set ones.

Sorting, windowing and aggregating the run in SQL cost the server more than the writes
themselves (text sorts under the database's collation); a dict in log order does it in
one pass.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from json.encoder import encode_basestring

from application.ports import SqlCursor

# (tenant, entity name, entity id, key, cell or None for a clear, definition id, generation)
ValueOp = tuple[str, str, str, str, str | None, str, int]


class ValueRunSql:
    """The statements of one (definitions, values) pair of tables."""

    def __init__(self, definitions: str, values: str) -> None:
        self.live = (
            f"SELECT definition_id, generation FROM {definitions}"
            " WHERE active = 1 AND definition_id = ANY(?::text[])"
        )
        self.clear = (
            f"UPDATE {values} AS v SET fields = v.fields - x.keys"
            " FROM (SELECT t, e, i, array_agg(k) AS keys"
            " FROM unnest(?::text[], ?::text[], ?::text[], ?::text[]) AS u(t, e, i, k)"
            " GROUP BY t, e, i) AS x"
            " WHERE v.tenant_id = x.t AND v.entity_name = x.e AND v.entity_id = x.i"
        )
        self.upsert = (
            f"INSERT INTO {values} AS v (tenant_id, entity_name, entity_id, fields)"
            " SELECT t, e, i, f::jsonb"
            " FROM unnest(?::text[], ?::text[], ?::text[], ?::text[]) AS u(t, e, i, f)"
            " ON CONFLICT (tenant_id, entity_name, entity_id)"
            " DO UPDATE SET fields = v.fields || excluded.fields"
        )


Row = tuple[str, str, str]  # (tenant, entity name, entity id)


def settle(
    ops: Sequence[ValueOp], live: Set[tuple[str, int]]
) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str, str, str]]]:
    """The run's net effect: (row, key) pairs to clear, and (row, JSON object of the keys
    last set) for each row a live value was set on."""
    # row -> (created, {key: cell or None}); a later op on a key replaces an earlier one.
    rows: dict[Row, tuple[list[bool], dict[str, str | None]]] = {}
    for tenant, entity, entity_id, key, cell, definition, generation in ops:
        if (definition, generation) not in live:
            continue
        found = rows.get((tenant, entity, entity_id))
        if found is None:
            found = rows[(tenant, entity, entity_id)] = ([False], {})
        found[1][key] = cell
        if cell is not None:
            found[0][0] = True
    cleared: list[tuple[str, str, str, str]] = []
    upserts: list[tuple[str, str, str, str]] = []
    for row, (created, cells) in rows.items():
        sets = []
        for key, cell in cells.items():
            if cell is None:
                cleared.append((*row, key))
            else:
                sets.append(f"{encode_basestring(key)}:{cell}")
        if created[0]:
            upserts.append((*row, "{" + ",".join(sets) + "}"))
    return cleared, upserts


def write_run(cur: SqlCursor, sql: ValueRunSql, ops: Sequence[ValueOp]) -> None:
    """Apply the run ``ops`` (in log order) to the values table."""
    cur.execute(sql.live, (sorted({op[5] for op in ops}),))
    cleared, upserts = settle(ops, {(str(d), int(g)) for d, g in cur.fetchall()})
    # Cleared and set keys of a row are distinct, so the two statements commute.
    if cleared:
        cur.execute(sql.clear, [list(column) for column in zip(*cleared, strict=True)])
    if upserts:
        cur.execute(sql.upsert, [list(column) for column in zip(*upserts, strict=True)])
