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

Each row also keeps ``version``: the entity stream's version of the last value event the
run holds for it, live or dead (a dead one moves the stream too). The retention sweeper
appends an expiry at the next version with no load of the stream; a stream that moved
since makes that append conflict (``application.custom_fields.expiry``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence, Set
from json.encoder import encode_basestring

from application.ports import Dialect, SqlCursor

# (tenant, entity name, entity id, key, cell or None for a clear, definition id, generation,
# the event's stream version)
ValueOp = tuple[str, str, str, str, str | None, str, int, int]
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
                f"UPDATE {values} AS v SET fields = v.fields - x.keys, version = x.n"
                " FROM (SELECT t, e, i, array_agg(k) AS keys, max(n) AS n FROM unnest("
                "?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[]) AS u(t, e, i, k, n)"
                " GROUP BY t, e, i) AS x"
                " WHERE v.tenant_id = x.t AND v.entity_name = x.e AND v.entity_id = x.i"
            )
            self.upsert = (
                f"INSERT INTO {values} AS v (tenant_id, entity_name, entity_id, fields, version)"
                " SELECT t, e, i, f::jsonb, n FROM unnest("
                "?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[]) AS u(t, e, i, f, n)"
                " ON CONFLICT (tenant_id, entity_name, entity_id)"
                " DO UPDATE SET fields = v.fields || excluded.fields, version = excluded.version"
            )
            self.moved = (
                f"UPDATE {values} AS v SET version = u.n"
                " FROM unnest(?::text[], ?::text[], ?::text[], ?::bigint[]) AS u(t, e, i, n)"
                " WHERE v.tenant_id = u.t AND v.entity_name = u.e AND v.entity_id = u.i"
            )
        else:
            self.clear = (
                f"UPDATE {values} SET fields = json_remove(fields, ?), version = ?"
                " WHERE tenant_id = ? AND entity_name = ? AND entity_id = ?"
            )
            self.moved = (
                f"UPDATE {values} SET version = ?"
                " WHERE tenant_id = ? AND entity_name = ? AND entity_id = ?"
            )
        self._upserts: dict[int, str] = {}

    def sqlite_upsert(self, keys: int) -> str:
        """Insert the row's object, or set its ``keys`` keys (path, cell) one by one."""
        statement = self._upserts.get(keys)
        if statement is None:
            pairs = ", ".join(["?, json(?)"] * keys)
            statement = self._upserts[keys] = (
                f"INSERT INTO {self.values} (tenant_id, entity_name, entity_id, fields, version)"
                " VALUES (?, ?, ?, json(?), ?) ON CONFLICT (tenant_id, entity_name, entity_id)"
                f" DO UPDATE SET fields = json_set(fields, {pairs}), version = excluded.version"
            )
        return statement


def _check_shape(op: ValueOp) -> None:
    """Refuse (``TypeError``) a value event whose fields are not what events hold: an
    imported one, say. A live value that is malformed fails on its own (unhashable, or
    refused by the database); a dead one would be passed over unseen."""
    *texts, cell, _, generation, version = op
    if not (
        all(type(text) is str for text in texts)
        and (cell is None or type(cell) is str)
        and type(generation) is int
        and type(version) is int
    ):
        raise TypeError(f"a value event of an unexpected shape: {op!r:.200}")


def settle(
    ops: Sequence[ValueOp], live: Set[tuple[str, int]]
) -> tuple[list[Cleared], list[Created], dict[Row, int]]:
    """The run's net effect: (row, key) pairs to clear, each row a live value was set on
    with its keys last set, and every row's stream version after the run."""
    # row -> (created, {key: cell or None}); a later op on a key replaces an earlier one.
    rows: dict[Row, tuple[list[bool], dict[str, str | None]]] = {}
    versions: dict[Row, int] = {}
    for op in ops:
        tenant, entity, entity_id, key, cell, definition, generation, version = op
        row = (tenant, entity, entity_id)
        if versions.get(row, -1) < version:
            versions[row] = version
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
    return cleared, created, versions


def json_object(sets: list[tuple[str, str]]) -> str:
    """The JSON object of (key, cell JSON text) pairs, from the cells' own text."""
    return "{" + ",".join(f"{encode_basestring(key)}:{cell}" for key, cell in sets) + "}"


def write_run(cur: SqlCursor, sql: ValueRunSql, ops: Sequence[ValueOp]) -> None:
    """Apply the run ``ops`` (in log order) to the values table."""
    named = sorted({op[5] for op in ops})
    cur.execute(sql.live, (named if sql.pg else json.dumps(named),))
    cleared, created, versions = settle(ops, {(str(d), int(g)) for d, g in cur.fetchall()})
    # Rows only dead values touched keep their cells; their version still moves.
    moved = dict(versions)
    for t, e, i, _ in cleared:
        moved.pop((t, e, i), None)
    for row, _ in created:
        moved.pop(row, None)
    # Cleared and set keys of a row are distinct, so the writes commute.
    if sql.pg:
        _write_postgres(cur, sql, cleared=cleared, created=created, versions=versions, moved=moved)
    else:
        _write_sqlite(cur, sql, cleared=cleared, created=created, versions=versions, moved=moved)


def _columns(rows: Sequence[tuple[object, ...]]) -> list[list[object]]:
    return [list(column) for column in zip(*rows, strict=True)]


def _write_postgres(
    cur: SqlCursor,
    sql: ValueRunSql,
    *,
    cleared: list[Cleared],
    created: list[Created],
    versions: dict[Row, int],
    moved: dict[Row, int],
) -> None:
    if cleared:
        cur.execute(sql.clear, _columns([(*c, versions[c[:3]]) for c in cleared]))
    if created:
        made = [(*row, json_object(sets), versions[row]) for row, sets in created]
        cur.execute(sql.upsert, _columns(made))
    if moved:
        cur.execute(sql.moved, _columns([(*row, version) for row, version in moved.items()]))


def _write_sqlite(
    cur: SqlCursor,
    sql: ValueRunSql,
    *,
    cleared: list[Cleared],
    created: list[Created],
    versions: dict[Row, int],
    moved: dict[Row, int],
) -> None:
    if cleared:
        cur.executemany(
            sql.clear, [(path(k), versions[(t, e, i)], t, e, i) for t, e, i, k in cleared]
        )
    by_width: dict[int, list[tuple[object, ...]]] = {}
    for row, sets in created:
        params: list[object] = [*row, json_object(sets), versions[row]]
        for key, cell in sets:
            params += (path(key), cell)
        by_width.setdefault(len(sets), []).append(tuple(params))
    for width, params_list in by_width.items():
        if width:
            cur.executemany(sql.sqlite_upsert(width), params_list)
        else:  # created, then every key cleared again: the row exists, empty
            cur.executemany(
                f"INSERT INTO {sql.values} (tenant_id, entity_name, entity_id, fields, version)"
                " VALUES (?, ?, ?, json(?), ?) ON CONFLICT (tenant_id, entity_name, entity_id)"
                " DO UPDATE SET version = excluded.version",
                params_list,
            )
    if moved:
        cur.executemany(sql.moved, [(version, *row) for row, version in moved.items()])
