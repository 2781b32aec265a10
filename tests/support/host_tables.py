"""A host application's own table for the host-projection tests: ``contacts`` with a
JSON ``custom_fields`` column (jsonb on PostgreSQL), created by the test, never by
tidings; and the ``contacts_column`` factory that ``TIDINGS_HOST_PROJECTIONS`` names."""

from __future__ import annotations

import json
from typing import Any

from application.ports import SqlDatabase
from projections.host_custom_fields import HostCustomFieldsColumn

NAME = "host_contacts_custom_fields"


def contacts_column() -> HostCustomFieldsColumn:
    return HostCustomFieldsColumn(
        table="contacts", id_column="id", column="custom_fields", entity_name="contact"
    )


def create_contacts(db: SqlDatabase, *, max_json: int | None = None) -> None:
    """The host's table; ``max_json`` adds the host's own CHECK on the column's size."""
    pg = db.dialect == "postgresql"
    json_type = "JSONB" if pg else "TEXT"
    size = "octet_length(custom_fields::text)" if pg else "length(custom_fields)"
    check = f", CHECK ({size} <= {max_json})" if max_json is not None else ""
    with db.transaction() as cur:
        cur.execute(
            "CREATE TABLE contacts (tenant_id TEXT NOT NULL, id TEXT NOT NULL,"
            f" name TEXT NOT NULL, custom_fields {json_type}{check},"
            " PRIMARY KEY (tenant_id, id))"
        )


def add_contact(db: SqlDatabase, tenant_id: str, contact_id: str, name: str = "x") -> None:
    with db.transaction() as cur:
        cur.execute(
            "INSERT INTO contacts (tenant_id, id, name) VALUES (?, ?, ?)",
            (tenant_id, contact_id, name),
        )


def columns(db: SqlDatabase) -> dict[tuple[str, str], Any]:
    """(tenant, id) -> the column as a dict (None where never written)."""
    with db.reading() as cur:
        cur.execute("SELECT tenant_id, id, custom_fields FROM contacts ORDER BY tenant_id, id")
        rows = cur.fetchall()
    return {
        (tenant, cid): (json.loads(raw) if isinstance(raw, str) else raw)
        for tenant, cid, raw in rows
    }
