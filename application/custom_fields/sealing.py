"""Custom-field values at rest: sealed under the tenant's key, each bound to its entity
and key (a token copied to another entity, key or tenant opens nowhere), with a keyed
digest per value for the equality filters of ``list-entities``.

A read-model cell is ``{"s": token, "d": digest}``. Once the tenant's key is shredded
every sealed value reads as ``[erased]`` and no filter matches one. Values from before
sealing (version 1 events, upcast to ``plain:`` cells, and cells of read models not
rebuilt since) were never encrypted: they still read, and match, as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from application.context import Context
from application.custom_fields.ports import Match
from application.privacy import ERASED, KeyErased, PiiCipher
from domain.custom_field_values import PLAIN, canonical_json, digest_form


@lru_cache(maxsize=4096)
def _purpose(entity_name: str, entity_id: str, field_key: str) -> str:
    return json.dumps(["field", entity_name, entity_id, field_key])


@lru_cache(maxsize=1024)
def _digest_purpose(entity_name: str, field_key: str) -> str:
    return json.dumps(["field-digest", entity_name, field_key])


def seal_value(
    ctx: Context, tenant_id: str, *, entity_name: str, entity_id: str, field_key: str, value: Any
) -> tuple[str, str]:
    """(token, digest) of a canonical value; raises ``KeyErased`` for a shredded tenant."""
    cipher = ctx.cipher
    token = cipher.seal(
        tenant_id, None, canonical_json(value), _purpose(entity_name, entity_id, field_key)
    )
    digest = cipher.digester(tenant_id, _digest_purpose(entity_name, field_key))
    return token, digest(digest_form(value))


def matches(
    ctx: Context, tenant_id: str, entity_name: str, where: Mapping[str, Any]
) -> dict[str, Match]:
    """Each canonical filter value as a ``Match``. Without a tenant key (shredded, or
    never created) no sealed cell can match: only values that were never sealed do."""
    found: dict[str, Match] = {}
    for key, value in where.items():
        form = digest_form(value)
        try:
            keyed: tuple[str, ...] = (
                ctx.cipher.digest(tenant_id, _digest_purpose(entity_name, key), form),
            )
        except KeyErased:
            keyed = ()
        found[key] = Match((*keyed, PLAIN + form), value)
    return found


def opener(
    ctx: Context, tenant_id: str, entity_name: str
) -> Callable[[str, Mapping[str, Any]], dict[str, Any]]:
    """Opens an entity's cells (by entity id) into its values, ``[erased]`` where a token
    does not open for this tenant, entity and key."""
    cipher = ctx.cipher

    def open_cells(entity_id: str, cells: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key, cell in cells.items():
            if not (isinstance(cell, dict) and cell.keys() == {"s", "d"}):
                values[key] = cell  # written before values were sealed
                continue
            token = cell["s"]
            if not isinstance(token, str):
                values[key] = ERASED
            elif token.startswith(PLAIN):
                values[key] = json.loads(token[len(PLAIN) :])
            else:
                plain = cipher.reveal(token, tenant_id, None, _purpose(entity_name, entity_id, key))
                values[key] = ERASED if plain is None else json.loads(plain)
        return values

    return open_cells


def open_value(
    cipher: PiiCipher,
    token: str,
    tenant_id: str,
    *,
    entity_name: str,
    entity_id: str,
    field_key: str,
) -> str:
    """The canonical JSON text of one event's sealed value, or of ``[erased]`` where the
    token does not open for this tenant, entity and key (for projections that write
    plaintext, e.g. ``HostCustomFieldsColumn``)."""
    if token.startswith(PLAIN):
        return token[len(PLAIN) :]
    plain = cipher.reveal(token, tenant_id, None, _purpose(entity_name, entity_id, field_key))
    return json.dumps(ERASED) if plain is None else plain
