"""``HostCustomFieldsColumn``: keeps a JSON column of the host's own table in step with
the custom-field values of one entity name.

The host creates and owns the table (say ``contacts (tenant_id, id, custom_fields)``);
this projection never creates, alters or drops it, and never inserts or deletes rows.
It only rewrites the named column of existing rows, matched by tenant and id (a row
for another tenant is never touched, so one tenant's entity ids cannot reach another's
rows). The column holds a JSON object key -> plaintext value (``jsonb`` on PostgreSQL,
JSON text on SQLite) and belongs to the projection: the host reads it, never writes it.

- ``set``/``clear``/``expired`` (an anonymized value is set to its anonymous form, a
  deleted one cleared) land only when the value's definition is active at the value's
  generation — the same rule as the built-in read model, checked in the statement —
  using a small definitions table the projection owns (``<name>_definitions``).
- A definition's delete removes the key from every affected host row with one
  set-based UPDATE: the tenant's rows (tenant scope), or every tenant's rows but those
  of tenants with their own active definition of the key (system scope).
- Values are sealed in events; the projection opens them with the tenant's key (the
  app's cipher, handed over by ``bootstrap``). A value whose key was shredded reads as
  ``"[erased]"``. Shredding a tenant does not reach the host's table by itself (no event
  records a shred): the host erases its own rows; a rebuild afterwards rewrites any
  remaining rows of that tenant with ``"[erased]"``.
- Rebuilt in place (the table is not ours to rename): in one transaction the column is
  reset to ``{}`` on every row, the owned definitions emptied, and the log replayed.
- A value set before the host row exists is not kept (there is no row to write); insert
  the row first, or rebuild once rows were added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from application.custom_fields.sealing import open_value
from application.ports import Dialect, Recorded, SqlCursor
from application.privacy import PiiCipher
from domain.custom_field_values import (
    CustomFieldValueCleared,
    CustomFieldValueExpired,
    CustomFieldValueSet,
)
from domain.field_definition import (
    FieldDefinitionDefined,
    FieldDefinitionDeleted,
    definition_id,
)
from projections.base import InvalidProjection, Projection, check_name, identifier


def _path(key: str) -> str:
    # Keys match ^[a-zA-Z][a-zA-Z0-9_-]*$, so quoting them in a JSON path is safe.
    return f'$."{key}"'


class HostCustomFieldsColumn:
    # The runner hands it these events only (and need not decode others for it).
    topics = frozenset(
        cls.TOPIC
        for cls in (
            CustomFieldValueSet,
            CustomFieldValueCleared,
            CustomFieldValueExpired,
            FieldDefinitionDefined,
            FieldDefinitionDeleted,
        )
    )

    def __init__(
        self,
        *,
        table: str,
        id_column: str,
        column: str,
        entity_name: str,
        tenant_column: str = "tenant_id",
        name: str | None = None,
    ) -> None:
        self.table = identifier(table, "table")
        self.id_column = identifier(id_column, "id_column")
        self.column = identifier(column, "column")
        self.tenant_column = identifier(tenant_column, "tenant_column")
        if len({self.id_column, self.column, self.tenant_column}) != 3:
            raise InvalidProjection("id_column, column and tenant_column must differ")
        if not isinstance(entity_name, str) or not entity_name:
            raise InvalidProjection(f"entity_name must be a non-empty string: {entity_name!r}")
        self.entity_name = entity_name
        self._name = check_name(f"host_{table}_{column}".lower() if name is None else name)
        self._tables = {"definitions": identifier(f"{self._name}_definitions", "name")}
        self._cipher: PiiCipher | None = None

    # --- the Projection protocol ----------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def tables(self) -> Mapping[str, str]:
        return self._tables

    def shadow(self) -> Projection:
        raise TypeError(f"{self._name} is rebuilt in place: it has no shadow")

    def use_cipher(self, cipher: PiiCipher) -> None:
        self._cipher = cipher

    def create(self, cur: SqlCursor, dialect: Dialect) -> None:
        """Create the owned definitions table; check the host's table and column."""
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self._tables['definitions']} ("
            " tenant_id TEXT NOT NULL, field_key TEXT NOT NULL, definition_id TEXT NOT NULL,"
            " generation INTEGER NOT NULL, active INTEGER NOT NULL,"
            " PRIMARY KEY (tenant_id, field_key))"
        )
        # Fails loudly (at bootstrap) when the host's table or a column is missing.
        cur.execute(
            f"SELECT {self.tenant_column}, {self.id_column}, {self.column}"
            f" FROM {self.table} WHERE 1 = 0"
        )
        cur.fetchall()
        if dialect == "postgresql":
            cur.execute(
                "SELECT data_type FROM information_schema.columns WHERE table_schema ="
                " current_schema() AND table_name = ? AND column_name = ?",
                (self.table.lower(), self.column.lower()),
            )
            row = cur.fetchone()
            if row is None or row[0] != "jsonb":
                raise InvalidProjection(
                    f"{self.table}.{self.column} must be a jsonb column on PostgreSQL"
                )

    def reset(self, cur: SqlCursor, dialect: Dialect) -> None:
        empty = "'{}'::jsonb" if dialect == "postgresql" else "'{}'"
        cur.execute(
            f"UPDATE {self.table} SET {self.column} = {empty} WHERE {self.column} IS NOT NULL"
        )
        cur.execute(f"DELETE FROM {self._tables['definitions']}")

    def apply(self, cur: SqlCursor, dialect: Dialect, batch: Sequence[Recorded]) -> None:
        pg = dialect == "postgresql"
        for recorded in batch:
            event = recorded.event
            if getattr(event, "entity_name", None) != self.entity_name:
                continue
            if isinstance(event, CustomFieldValueSet):
                self._set(cur, pg, event)
            elif isinstance(event, CustomFieldValueCleared):
                self._clear(cur, pg, event)
            elif isinstance(event, CustomFieldValueExpired):
                if event.sealed is None:
                    self._clear(cur, pg, event)
                else:
                    self._set(cur, pg, event)
            elif isinstance(event, FieldDefinitionDefined):
                self._define(cur, event)
            elif isinstance(event, FieldDefinitionDeleted):
                self._delete(cur, pg, event)

    # --- the statements -------------------------------------------------------------

    def _live(self) -> str:
        return (
            f"EXISTS (SELECT 1 FROM {self._tables['definitions']} d"
            " WHERE d.definition_id = ? AND d.generation = ? AND d.active = 1)"
        )

    def _set(
        self, cur: SqlCursor, pg: bool, event: CustomFieldValueSet | CustomFieldValueExpired
    ) -> None:
        if self._cipher is None:
            raise RuntimeError(f"{self._name} was given no cipher (use bootstrap)")
        if event.sealed is None:
            raise TypeError("an expiry without a sealed value is a clear")
        value = open_value(
            self._cipher,
            event.sealed,
            event.tenant_id,
            entity_name=event.entity_name,
            entity_id=event.entity_id,
            field_key=event.field_key,
        )
        col = self.column
        if pg:
            update = f"COALESCE({col}, '{{}}'::jsonb) || jsonb_build_object(?::text, ?::jsonb)"
            key: Any = event.field_key
        else:
            update = f"json_set(COALESCE({col}, '{{}}'), ?, json(?))"
            key = _path(event.field_key)
        cur.execute(
            f"UPDATE {self.table} SET {col} = {update}"
            f" WHERE {self.tenant_column} = ? AND {self.id_column} = ? AND {self._live()}",
            (key, value, event.tenant_id, event.entity_id, event.definition_id, event.generation),
        )

    def _clear(
        self, cur: SqlCursor, pg: bool, event: CustomFieldValueCleared | CustomFieldValueExpired
    ) -> None:
        col = self.column
        update = f"{col} - ?::text" if pg else f"json_remove({col}, ?)"
        cur.execute(
            f"UPDATE {self.table} SET {col} = {update}"
            f" WHERE {self.tenant_column} = ? AND {self.id_column} = ? AND {self._live()}",
            (
                event.field_key if pg else _path(event.field_key),
                event.tenant_id,
                event.entity_id,
                event.definition_id,
                event.generation,
            ),
        )

    def _define(self, cur: SqlCursor, event: FieldDefinitionDefined) -> None:
        cur.execute(
            f"INSERT INTO {self._tables['definitions']}"
            " (tenant_id, field_key, definition_id, generation, active) VALUES (?, ?, ?, ?, 1)"
            " ON CONFLICT (tenant_id, field_key) DO UPDATE SET"
            " definition_id = excluded.definition_id, generation = excluded.generation,"
            " active = 1",
            (
                event.tenant_id,
                event.field_key,
                str(definition_id(event.tenant_id, event.entity_name, event.field_key)),
                event.generation,
            ),
        )

    def _delete(self, cur: SqlCursor, pg: bool, event: FieldDefinitionDeleted) -> None:
        """Deactivate, then one set-based statement takes the key out of every row."""
        definitions = self._tables["definitions"]
        cur.execute(
            f"UPDATE {definitions} SET active = 0 WHERE tenant_id = ? AND field_key = ?",
            (event.tenant_id, event.field_key),
        )
        col, table = self.column, self.table
        if pg:
            statement = f"UPDATE {table} SET {col} = {col} - ?::text WHERE jsonb_exists({col}, ?)"
            params: list[Any] = [event.field_key, event.field_key]
        else:
            path = _path(event.field_key)
            statement = (
                f"UPDATE {table} SET {col} = json_remove({col}, ?)"
                f" WHERE json_type({col}, ?) IS NOT NULL"
            )
            params = [path, path]
        if event.scope == "tenant":
            statement += f" AND {self.tenant_column} = ?"
            params.append(event.tenant_id)
        else:
            # A tenant's own active definition of the key shadows the system's for that
            # tenant; its values are not the system's to remove.
            statement += (
                f" AND NOT EXISTS (SELECT 1 FROM {definitions} d"
                f" WHERE d.tenant_id = CAST({table}.{self.tenant_column} AS TEXT)"
                " AND d.field_key = ? AND d.active = 1)"
            )
            params.append(event.field_key)
        cur.execute(statement, params)
