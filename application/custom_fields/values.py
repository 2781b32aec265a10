"""What set and clear share: the gates (roles, an active definition, the field's own
access), validation and sealing, and one retrying commit on the entity's stream.

The definitions (the tenant's and the system's) and the entity come from the process's
write cache (``write_cache.py``), else from one read of all three; the commit checks the
definitions' versions inside its transaction, so a stale cache costs a retry, never a
wrong answer. A set on an entity the cache does not hold, under cached definitions,
reads nothing: it takes the entity as new and the commit checks that its stream is
still empty."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from functools import lru_cache
from typing import Any, Literal, NamedTuple, TypedDict
from uuid import UUID

from application.context import Context
from application.custom_fields.definitions import EntityId, FieldRef
from application.custom_fields.sealing import seal_value
from application.errors import ConcurrencyConflict, StaleRead
from application.result import Result, forbidden, not_found, version_conflict
from application.streams import ATTEMPTS, commit, replay
from application.users import SYSTEM_TENANT_ID, User
from domain.custom_field_values import EntityCustomFields, entity_stream_id
from domain.field_definition import FieldDefinition, definition_id
from domain.field_types import Invalid, validate_value


class ValueRef(FieldRef):
    entity_id: EntityId


class ValueTarget(TypedDict):
    """The value a set or clear is about: on which entity, under which definition."""

    tenant_id: str
    entity_name: str
    entity_id: str
    field_key: str
    definition_id: UUID
    generation: int


class Clear(Enum):
    """The change of clear-custom-field (set-custom-field's is the value itself)."""

    VALUE = "clear"


CLEAR: Literal[Clear.VALUE] = Clear.VALUE


@lru_cache(maxsize=4096)
def _definition_ids(tenant_id: str, entity: str, key: str) -> tuple[UUID, UUID]:
    return definition_id(tenant_id, entity, key), definition_id(SYSTEM_TENANT_ID, entity, key)


@lru_cache(maxsize=4096)
def _entity_stream(tenant_id: str, entity_name: str, entity_id: str) -> UUID:
    return entity_stream_id(tenant_id, entity_name, entity_id)


def active_definition(definitions: Sequence[FieldDefinition]) -> FieldDefinition | None:
    """The tenant's own definition of the key, else the system's, if active
    (``definitions``: the two, tenant first)."""
    return next((d for d in definitions if d.active), None)


def _writable(
    definition: FieldDefinition | None, payload: ValueRef, user: User
) -> FieldDefinition | Result:
    """The definition the caller may write this value under, or the refusal to answer."""
    if definition is None or definition.settings is None:
        return not_found(f"field {payload.entity_name}.{payload.field_key}")
    required = definition.settings.write_roles
    if required is not None and not user.has_any(required):
        return Result.fail(
            "field_access_denied",
            422,
            f"writing {payload.field_key} needs one of {list(required)}",
            requiredRoles=list(required),
        )
    return definition


class _Again(Exception):
    """Decide once more, on fresh reads (an answer that rested on the cache)."""


def write_value(payload: ValueRef, user: User, ctx: Context, change: Any) -> Result:
    """Set the value ``change`` (validated, then sealed), or clear it (``CLEAR``)."""
    if not user.has_any(ctx.policy.value_write_roles):
        return forbidden()
    write = _ValueWrite(payload, user, ctx, change)
    for _ in range(ATTEMPTS):
        try:
            return write.attempt()
        except (ConcurrencyConflict, _Again):
            continue
    return version_conflict()


class _Gathered(NamedTuple):
    definitions: list[FieldDefinition]
    entity: EntityCustomFields
    cached_definitions: bool
    cached_entity: bool
    assumed_new: bool  # the entity: not read, taken as new (its stream checked empty)


class _ValueWrite:
    """One set or clear. The definitions and the entity come from the process's write
    cache when it holds them, else from one read; an answer that rested on the cache
    is either checked by the commit (inside its transaction: the definitions' versions,
    and the empty stream of an entity taken as new; a cached entity's version by the
    store's version rule) or, when nothing is committed (a refusal, a clear of
    nothing), decided once more on fresh reads."""

    def __init__(self, payload: ValueRef, user: User, ctx: Context, change: Any) -> None:
        self.payload, self.user, self.ctx, self.change = payload, user, ctx, change
        self.tenant = user.tenant_id
        self.stream = _entity_stream(self.tenant, payload.entity_name, payload.entity_id)
        self.ids = _definition_ids(self.tenant, payload.entity_name, payload.field_key)
        self.fresh_definitions = False
        self.fresh_entity = False

    def gather(self) -> _Gathered:
        """The definitions and the entity, from the cache, a read, or (an entity) taken
        as new."""
        cache = self.ctx.write_cache
        definitions = None if self.fresh_definitions else cache.definitions(self.ids)
        entity = None if self.fresh_entity else cache.take_entity(self.stream)
        cached_definitions = definitions is not None
        # A set on an entity the cache does not hold takes it as new when nothing else
        # needs a read: the commit checks that its stream is still empty (expected
        # version 0), and a stream that held events after all costs a retry on a fresh
        # read. (A clear decides on the entity's values, so it reads them.)
        assumed_new = (
            entity is None
            and cached_definitions
            and not self.fresh_entity
            and self.change is not CLEAR
        )
        cached_entity = entity is not None
        if assumed_new:
            entity = EntityCustomFields(self.stream)
        if definitions is None or entity is None:
            wanted = [
                *(self.ids if definitions is None else ()),
                *((self.stream,) if entity is None else ()),
            ]
            loaded = self.ctx.store.load_many(wanted)
            if definitions is None:
                definitions = [replay(FieldDefinition, s, loaded[s]) for s in self.ids]
                cache.keep_definitions(definitions)
            if entity is None:
                entity = replay(EntityCustomFields, self.stream, loaded[self.stream])
        return _Gathered(definitions, entity, cached_definitions, cached_entity, assumed_new)

    def attempt(self) -> Result:
        cache = self.ctx.write_cache
        definitions, entity, cached_definitions, cached_entity, assumed_new = self.gather()
        decided = self.decide(definitions)
        if isinstance(decided, Result):
            if not assumed_new:
                cache.put_entity(entity)  # untouched
            if cached_definitions:
                self.fresh_definitions = True
                raise _Again
            return decided
        definition, sealed, answer = decided
        target = ValueTarget(
            tenant_id=self.tenant,
            entity_name=self.payload.entity_name,
            entity_id=self.payload.entity_id,
            field_key=self.payload.field_key,
            definition_id=definition.id,
            generation=definition.generation,
        )
        now = self.ctx.clock.now()
        if sealed is None:
            answer["cleared"] = entity.clear_value(**target, now=now)
        else:
            entity.set_value(**target, sealed=sealed[0], digest=sealed[1], now=now)
        expected = {d.id: d.version for d in definitions}
        if assumed_new:
            expected[self.stream] = 0
        try:
            events = commit(self.ctx.store, entity, expected=expected)
        except StaleRead:
            cache.forget_definitions(self.ids)
            self.fresh_definitions = True
            self.fresh_entity = self.fresh_entity or assumed_new
            raise
        except ConcurrencyConflict:
            self.fresh_entity = True  # the cached version is behind the store's
            raise
        cache.put_entity(entity)
        if not events and (cached_definitions or cached_entity):
            # Nothing committed, so nothing was checked: decide again on fresh reads.
            self.fresh_definitions = self.fresh_entity = True
            raise _Again
        return Result.ok(answer)

    def decide(
        self, definitions: Sequence[FieldDefinition]
    ) -> Result | tuple[FieldDefinition, tuple[str, str] | None, dict[str, Any]]:
        """The refusal, or the definition to write under, the sealed value (None: a
        clear) and the answer so far."""
        payload, ctx = self.payload, self.ctx
        definition = _writable(active_definition(definitions), payload, self.user)
        if isinstance(definition, Result):
            return definition
        answer: dict[str, Any] = {
            "entityName": payload.entity_name,
            "entityId": payload.entity_id,
            "fieldKey": payload.field_key,
        }
        if self.change is CLEAR:
            return definition, None, answer
        spec = definition.spec
        try:
            value = validate_value(spec, self.change, max_text_bytes=ctx.policy.max_text_bytes)
        except Invalid as invalid:
            return Result.fail(
                "custom_field_value_invalid",
                422,
                str(invalid),
                fieldKey=payload.field_key,
                fieldType=spec.type,
                issues=invalid.issues,
            )
        sealed = seal_value(
            ctx,
            self.tenant,
            entity_name=payload.entity_name,
            entity_id=payload.entity_id,
            field_key=payload.field_key,
            value=value,
        )
        answer["value"] = value
        return definition, sealed, answer
