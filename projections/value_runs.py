"""A run of custom-field value events, settled in memory, then written set-based.

A run is the value events between two definition events: every definition it can name
stands still while it applies. So the run is settled in memory first, in log order:
the values whose definition is live (one small read of the definitions it names), of
those the last per (entity row, key), and per row the keys last set, the keys last
cleared, and whether any live value was set on it (a row that did not exist is created
exactly then, as one event after the other would leave it). The database then does
only what needs its indexes: remove the cleared keys, upsert the rows with their set
keys (PostgreSQL: one statement each over arrays; SQLite: one ``executemany`` each).

Sorting, windowing and aggregating the run in SQL cost PostgreSQL more than the writes
themselves (text sorts under the database's collation), and a definition check inside
each of SQLite's per-value statements cost it a lookup per value; a dict in log order
does both in one pass.
"""

from __future__ import annotations

import json
from collections.abc import Sequence, Set
from json.encoder import encode_basestring

from application.ports import Dialect, SqlCursor

# (tenant, entity name, entity id, key, cell or None for a clear, definition id, generation)
ValueOp = tuple[str, str, str, str, str | None, str, int]
Row = tuple[str, str, str]  # (tenant, entity name, entity id)
Cleared = tuple[str, str, str, str]  # (tenant, entity name, entity id, key)
Created = tuple[Row, list[tuple[str, str]]]  # a row and its (key, cell) last set


def path(key: str) -> str:
    # Keys match ^[a-zA-Z][a-zA-Z0-9_-]*$, so quoting them in a JSON path is safe.
    return f'$."{key}"'


class ValueRunSql:
    """The statements of one (definitions, values) pair of tables, in one dialect."""

    def __init__(self, dialect: Dialect, definitions: str, values: str) -> None:
        self.pg = dialect == "postgresql"
        self.values = values
        named = "= ANY(?::text[])" if self.pg else "IN (SELECT value FROM json_each(?))"
        self.live = (
            f"SELECT definition_id, generation FROM {definitions}"
            f" WHERE active = 1 AND definition_id {named}"
        )
        if self.pg:
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
        else:
            self.clear = (
                f"UPDATE {values} SET fields = json_remove(fields, ?)"
                " WHERE tenant_id = ? AND entity_name = ? AND entity_id = ?"
            )
        self._upserts: dict[int, str] = {}

    def sqlite_upsert(self, keys: int) -> str:
        """Insert the row's object, or set its ``keys`` keys (path, cell) one by one."""
        statement = self._upserts.get(keys)
        if statement is None:
            pairs = ", ".join(["?, json(?)"] * keys)
            statement = self._upserts[keys] = (
                f"INSERT INTO {self.values} (tenant_id, entity_name, entity_id, fields)"
                " VALUES (?, ?, ?, json(?)) ON CONFLICT (tenant_id, entity_name, entity_id)"
                f" DO UPDATE SET fields = json_set(fields, {pairs})"
            )
        return statement


def _check_shape(op: ValueOp) -> None:
    """Refuse (``TypeError``) a value event whose fields are not what events hold: an
    imported one, say. A live value that is malformed fails on its own (unhashable, or
    refused by the database); a dead one would be passed over unseen."""
    *texts, cell, _, generation = op
    if not (
        all(type(text) is str for text in texts)
        and (cell is None or type(cell) is str)
        and type(generation) is int
    ):
        raise TypeError(f"a value event of an unexpected shape: {op!r:.200}")


def settle(
    ops: Sequence[ValueOp], live: Set[tuple[str, int]]
) -> tuple[list[Cleared], list[Created]]:
    """The run's net effect: (row, key) pairs to clear, and each row a live value was
    set on with its keys last set."""
    # row -> (created, {key: cell or None}); a later op on a key replaces an earlier one.
    rows: dict[Row, tuple[list[bool], dict[str, str | None]]] = {}
    for op in ops:
        tenant, entity, entity_id, key, cell, definition, generation = op
        if (definition, generation) not in live:
            _check_shape(op)  # a dead value is passed over, a malformed one quarantined
            continue
        found = rows.get((tenant, entity, entity_id))
        if found is None:
            found = rows[(tenant, entity, entity_id)] = ([False], {})
        found[1][key] = cell
        if cell is not None:
            found[0][0] = True
    cleared: list[Cleared] = []
    created: list[Created] = []
    for row, (made, cells) in rows.items():
        sets = []
        for key, cell in cells.items():
            if cell is None:
                cleared.append((*row, key))
            else:
                sets.append((key, cell))
        if made[0]:
            created.append((row, sets))
    return cleared, created


def json_object(sets: list[tuple[str, str]]) -> str:
    """The JSON object of (key, cell JSON text) pairs, from the cells' own text."""
    return "{" + ",".join(f"{encode_basestring(key)}:{cell}" for key, cell in sets) + "}"


def write_run(cur: SqlCursor, sql: ValueRunSql, ops: Sequence[ValueOp]) -> None:
    """Apply the run ``ops`` (in log order) to the values table."""
    named = sorted({op[5] for op in ops})
    cur.execute(sql.live, (named if sql.pg else json.dumps(named),))
    cleared, created = settle(ops, {(str(d), int(g)) for d, g in cur.fetchall()})
    # Cleared and set keys of a row are distinct, so the writes commute.
    if sql.pg:
        if cleared:
            cur.execute(sql.clear, [list(column) for column in zip(*cleared, strict=True)])
        if created:
            rows = [(*row, json_object(sets)) for row, sets in created]
            cur.execute(sql.upsert, [list(column) for column in zip(*rows, strict=True)])
        return
    if cleared:
        cur.executemany(sql.clear, [(path(k), t, e, i) for t, e, i, k in cleared])
    by_width: dict[int, list[tuple[str, ...]]] = {}
    for row, sets in created:
        params = [*row, json_object(sets)]
        for key, cell in sets:
            params += (path(key), cell)
        by_width.setdefault(len(sets), []).append(tuple(params))
    for width, params_list in by_width.items():
        if width:
            cur.executemany(sql.sqlite_upsert(width), params_list)
        else:  # created, then every key cleared again: the row exists, empty
            cur.executemany(
                f"INSERT INTO {sql.values} (tenant_id, entity_name, entity_id, fields)"
                " VALUES (?, ?, ?, json(?)) ON CONFLICT DO NOTHING",
                params_list,
            )
