"""Shared rules of the definition handlers (define/update/delete, tenant and system)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints
from pydantic.alias_generators import to_camel

from application.context import Context
from application.payloads import Payload
from application.result import Result, forbidden, invalid_payload, not_found
from application.streams import commit, load, replay, retrying
from application.users import KNOWN_ROLES, SYSTEM_ADMIN, SYSTEM_TENANT_ID, User
from domain.field_definition import (
    CapExceeded,
    FieldCatalog,
    FieldDefinition,
    FieldSettings,
    FieldTypeImmutable,
    Scope,
    catalog_id,
    definition_id,
)
from domain.field_types import Invalid, check_field_spec
from domain.retention import InvalidRetention, Retention

KEY_PATTERN = r"^[a-zA-Z][a-zA-Z0-9_-]*$"
Key = Annotated[str, StringConstraints(pattern=KEY_PATTERN, max_length=64)]
EntityId = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class FieldRef(Payload):
    entity_name: Key
    field_key: Key


class RetentionPayload(Payload):
    keep_for: Annotated[str, StringConstraints(max_length=8)]  # "30d".."10y"
    action: Literal["delete", "anonymize"]


class DefinitionPayload(FieldRef):
    field: dict[str, Any]
    required: bool = False
    searchable: bool = False
    display_order: Annotated[int, Field(ge=-1_000_000, le=1_000_000)] = 0
    label: Annotated[str, StringConstraints(max_length=200)] | None = None
    retention: RetentionPayload | None = None  # None: values are kept for ever


def retention_from(payload: RetentionPayload | None) -> Retention | dict[str, str] | None:
    """The retention of a payload, or its error (the bounds of ``keepFor``)."""
    if payload is None:
        return None
    try:
        return Retention(keep_for=payload.keep_for, action=payload.action)
    except InvalidRetention as invalid:
        return {"path": "retention.keepFor", "message": str(invalid)}


def settings_from(payload: DefinitionPayload) -> FieldSettings | Result:
    # Option names are camelCase on the wire; snake_case (``max_length``) is accepted too.
    field = {to_camel(n) if "_" in n else n: value for n, value in payload.field.items()}
    errors: list[dict[str, str]] = []
    if len(field) != len(payload.field):
        errors.append({"path": "field", "message": "an option is given twice"})
    field_type = field.pop("type", None)
    access = field.pop("fieldAccess", None)
    write_roles: tuple[str, ...] | None = None
    if access is not None:
        roles = access.get("write") if isinstance(access, dict) else None
        if (
            not isinstance(roles, list)
            or not roles
            or not all(isinstance(r, str) and r and r.strip() == r for r in roles)
            or set(access) != {"write"}
        ):
            errors.append(
                {
                    "path": "field.fieldAccess",
                    "message": "expected {'write': [role names]}",
                }
            )
        else:
            write_roles = tuple(sorted(set(roles)))
    retention = retention_from(payload.retention)
    if isinstance(retention, dict):
        errors.append(retention)
        retention = None
    if not isinstance(field_type, str):
        errors.append({"path": "field.type", "message": "field type is required"})
        return invalid_payload(errors)
    try:
        spec = check_field_spec(field_type, field)
    except Invalid as invalid:
        errors.extend({"path": "field", "message": issue} for issue in invalid.issues)
    if errors:
        return invalid_payload(errors)
    return FieldSettings(
        spec=spec,
        write_roles=write_roles,
        required=payload.required,
        searchable=payload.searchable,
        display_order=payload.display_order,
        label=payload.label if payload.label is not None else payload.field_key,
        retention=retention,
    )


def check_tenant_definition_writer(user: User, ctx: Context) -> Result | None:
    if user.in_system_tenant:
        return Result.fail(
            "system_tenant_not_allowed",
            422,
            "the system tenant defines system fields, not tenant fields",
        )
    if not user.has_any(ctx.policy.field_definition_write_roles):
        return forbidden()
    return None


def check_reader(user: User, ctx: Context) -> Result | None:
    """Queries: any built-in role, or any role configured to write here (custom roles)."""
    policy = ctx.policy
    readers = KNOWN_ROLES | policy.field_definition_write_roles | policy.value_write_roles
    return None if user.has_any(readers) else forbidden()


def check_system_definition_writer(user: User) -> Result | None:
    return None if SYSTEM_ADMIN in user.roles else forbidden()


def _described(payload: FieldRef, scope: Scope, generation: int) -> dict[str, Any]:
    return {
        "entityName": payload.entity_name,
        "fieldKey": payload.field_key,
        "scope": scope,
        "generation": generation,
    }


def define(payload: DefinitionPayload, tenant_id: str, scope: Scope, ctx: Context) -> Result:
    settings = settings_from(payload)
    if isinstance(settings, Result):
        return settings
    entity, key = payload.entity_name, payload.field_key

    own = definition_id(tenant_id, entity, key)
    system_id = definition_id(SYSTEM_TENANT_ID, entity, key)
    catalog_stream = catalog_id(tenant_id)
    # One round trip: the system's definition (the reserved-key rule), the tenant's own,
    # and the tenant's catalog (the exact cap).
    streams = (own,) if scope == "system" else (system_id, own, catalog_stream)

    def attempt() -> Result:
        loaded = ctx.store.load_many(streams)
        if scope == "tenant":
            system = replay(FieldDefinition, system_id, loaded[system_id])
            if system.active:
                return Result.fail(
                    "field_key_reserved",
                    422,
                    f"the system defines {entity}.{key}",
                    entityName=entity,
                    fieldKey=key,
                )
        definition = replay(FieldDefinition, own, loaded[own])
        if definition.active:
            return Result.fail("version_conflict", 409, f"{entity}.{key} is already defined")
        now = ctx.clock.now()
        definition.define(
            tenant_id=tenant_id,
            entity_name=entity,
            field_key=key,
            scope=scope,
            settings=settings,
            now=now,
        )
        if scope == "system":
            _commit(ctx, definition)
            return Result.ok(_described(payload, scope, definition.generation))
        catalog = replay(FieldCatalog, catalog_stream, loaded[catalog_stream])
        limit = ctx.policy.field_definition_limit_per_tenant
        try:
            catalog.claim(
                tenant_id=tenant_id, entity_name=entity, field_key=key, limit=limit, now=now
            )
        except CapExceeded as exceeded:
            return Result.fail(
                "cap_exceeded",
                422,
                str(exceeded),
                capName="fieldDefinitionsPerTenant",
                limit=exceeded.limit,
                current=exceeded.current,
            )
        _commit(ctx, definition, catalog)
        return Result.ok(_described(payload, scope, definition.generation))

    return retrying(attempt)


def _commit(ctx: Context, definition: FieldDefinition, *others: FieldCatalog) -> None:
    """Commit, and drop this process's cached copy of the definition: its next set or
    clear reads the new one instead of failing the commit's check once."""
    try:
        commit(ctx.store, definition, *others)
    finally:
        ctx.write_cache.forget_definitions([definition.id])


def update(payload: DefinitionPayload, tenant_id: str, ctx: Context) -> Result:
    settings = settings_from(payload)
    if isinstance(settings, Result):
        return settings
    entity, key = payload.entity_name, payload.field_key

    def attempt() -> Result:
        definition = load(ctx.store, FieldDefinition, definition_id(tenant_id, entity, key))
        if not definition.active:
            return not_found(f"field {entity}.{key}")
        try:
            definition.update(
                tenant_id=tenant_id,
                entity_name=entity,
                field_key=key,
                settings=settings,
                now=ctx.clock.now(),
            )
        except FieldTypeImmutable as immutable:
            return Result.fail(
                "field_type_immutable",
                422,
                str(immutable),
                entityName=entity,
                fieldKey=key,
                currentType=immutable.current,
                requestedType=immutable.requested,
            )
        _commit(ctx, definition)
        return Result.ok(_described(payload, definition.scope, definition.generation))

    return retrying(attempt)


def delete(payload: FieldRef, tenant_id: str, ctx: Context) -> Result:
    entity, key = payload.entity_name, payload.field_key

    own, catalog_stream = definition_id(tenant_id, entity, key), catalog_id(tenant_id)

    def attempt() -> Result:
        loaded = ctx.store.load_many((own, catalog_stream))  # one round trip for both
        definition = replay(FieldDefinition, own, loaded[own])
        if not definition.active:
            return not_found(f"field {entity}.{key}")
        now = ctx.clock.now()
        definition.delete(tenant_id=tenant_id, entity_name=entity, field_key=key, now=now)
        catalogs: list[FieldCatalog] = []
        if definition.scope == "tenant":
            catalog = replay(FieldCatalog, catalog_stream, loaded[catalog_stream])
            catalog.release(tenant_id=tenant_id, entity_name=entity, field_key=key, now=now)
            catalogs.append(catalog)
        _commit(ctx, definition, *catalogs)
        return Result.ok(_described(payload, definition.scope, definition.generation))

    return retrying(attempt)
