"""Field definitions: one stream per (tenant or system, entity, key).

State machine: (new) --define--> active --update--> active --delete--> deleted
--define--> active (same stream, generation + 1, any type). Only ``define`` is allowed
on a new or deleted definition; only ``update``/``delete`` on an active one.

``generation`` counts the defines of the stream. Every value carries the generation
it was written under, so a value written by a racing writer just before a delete can
never surface under a later re-definition of the same key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal
from uuid import UUID

from domain.errors import DomainError
from domain.events import Aggregate, DomainEvent
from domain.field_types import FieldSpec, check_field_spec
from domain.identity import stream_id
from domain.retention import Retention

Scope = Literal["tenant", "system"]


class FieldDefinitionError(DomainError):
    pass


class DefinitionAlreadyActive(FieldDefinitionError):
    pass


class DefinitionNotActive(FieldDefinitionError):
    pass


class FieldTypeImmutable(FieldDefinitionError):
    def __init__(self, current: str, requested: str) -> None:
        super().__init__(f"field type is {current}, cannot become {requested}")
        self.current = current
        self.requested = requested


@dataclass(frozen=True)
class FieldSettings:
    """Everything a define/update sets, already validated."""

    spec: FieldSpec
    write_roles: tuple[str, ...] | None
    required: bool
    searchable: bool
    display_order: int
    label: str
    retention: Retention | None = None

    def as_event_fields(self) -> dict[str, Any]:
        return {
            "field": self.spec.to_json(),
            "field_access": None if self.write_roles is None else {"write": list(self.write_roles)},
            "required": self.required,
            "searchable": self.searchable,
            "display_order": self.display_order,
            "label": self.label,
            "retention": None if self.retention is None else self.retention.to_json(),
        }

    @staticmethod
    def from_event(event: FieldDefinitionDefined | FieldDefinitionUpdated) -> FieldSettings:
        field = dict(event.field)
        field_type = field.pop("type")
        access = event.field_access
        return FieldSettings(
            spec=check_field_spec(field_type, field),
            write_roles=None if access is None else tuple(access["write"]),
            required=event.required,
            searchable=event.searchable,
            display_order=event.display_order,
            label=event.label,
            retention=Retention.from_json(event.retention),
        )


@dataclass(frozen=True, kw_only=True)
class FieldDefinitionDefined(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.FieldDefinitionDefined"
    CLASS_VERSION: ClassVar[int] = 3

    tenant_id: str
    entity_name: str
    field_key: str
    scope: Scope
    generation: int
    field: dict[str, Any]
    field_access: dict[str, Any] | None
    required: bool
    searchable: bool
    display_order: int
    label: str
    retention: dict[str, Any] | None  # Retention.to_json(); None: kept for ever

    @staticmethod
    def upcast_v1(state: dict[str, Any]) -> dict[str, Any]:
        # v1 had neither display order nor label; they default to 0 and the key.
        return {**state, "display_order": 0, "label": state["field_key"]}

    @staticmethod
    def upcast_v2(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "retention": None}  # v2 had no retention: kept for ever


@dataclass(frozen=True, kw_only=True)
class FieldDefinitionUpdated(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.FieldDefinitionUpdated"
    CLASS_VERSION: ClassVar[int] = 2

    tenant_id: str
    entity_name: str
    field_key: str
    generation: int
    field: dict[str, Any]
    field_access: dict[str, Any] | None
    required: bool
    searchable: bool
    display_order: int
    label: str
    retention: dict[str, Any] | None

    @staticmethod
    def upcast_v1(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "retention": None}  # v1 had no retention: kept for ever


@dataclass(frozen=True, kw_only=True)
class FieldDefinitionDeleted(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.FieldDefinitionDeleted"

    tenant_id: str
    entity_name: str
    field_key: str
    scope: Scope
    generation: int


def definition_id(tenant_id: str, entity_name: str, field_key: str) -> UUID:
    return stream_id("field-definition", tenant_id, entity_name, field_key)


class FieldDefinition(Aggregate):
    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.active = False
        self.generation = 0
        self.scope: Scope = "tenant"
        self.settings: FieldSettings | None = None

    @property
    def spec(self) -> FieldSpec:
        if self.settings is None:
            raise DefinitionNotActive("never defined")
        return self.settings.spec

    def define(
        self,
        *,
        tenant_id: str,
        entity_name: str,
        field_key: str,
        scope: Scope,
        settings: FieldSettings,
        now: datetime,
    ) -> None:
        if self.active:
            raise DefinitionAlreadyActive(f"{entity_name}.{field_key} is already defined")
        self._trigger(
            FieldDefinitionDefined,
            now,
            tenant_id=tenant_id,
            entity_name=entity_name,
            field_key=field_key,
            scope=scope,
            generation=self.generation + 1,
            **settings.as_event_fields(),
        )

    def update(
        self,
        *,
        tenant_id: str,
        entity_name: str,
        field_key: str,
        settings: FieldSettings,
        now: datetime,
    ) -> None:
        if not self.active:
            raise DefinitionNotActive(f"{entity_name}.{field_key} is not defined")
        if settings.spec.type != self.spec.type:
            raise FieldTypeImmutable(self.spec.type, settings.spec.type)
        self._trigger(
            FieldDefinitionUpdated,
            now,
            tenant_id=tenant_id,
            entity_name=entity_name,
            field_key=field_key,
            generation=self.generation,
            **settings.as_event_fields(),
        )

    def delete(self, *, tenant_id: str, entity_name: str, field_key: str, now: datetime) -> None:
        if not self.active:
            raise DefinitionNotActive(f"{entity_name}.{field_key} is not defined")
        self._trigger(
            FieldDefinitionDeleted,
            now,
            tenant_id=tenant_id,
            entity_name=entity_name,
            field_key=field_key,
            scope=self.scope,
            generation=self.generation,
        )

    def mutate(self, event: DomainEvent) -> None:
        if isinstance(event, FieldDefinitionDefined):
            self.active = True
            self.generation = event.generation
            self.scope = event.scope
            self.settings = FieldSettings.from_event(event)
        elif isinstance(event, FieldDefinitionUpdated):
            self.settings = FieldSettings.from_event(event)
        elif isinstance(event, FieldDefinitionDeleted):
            self.active = False


# --- the per-tenant catalog: keeps the cap exact under concurrent defines -----------


@dataclass(frozen=True, kw_only=True)
class FieldSlotClaimed(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.FieldSlotClaimed"

    tenant_id: str
    entity_name: str
    field_key: str


@dataclass(frozen=True, kw_only=True)
class FieldSlotReleased(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.FieldSlotReleased"

    tenant_id: str
    entity_name: str
    field_key: str


class CapExceeded(FieldDefinitionError):
    def __init__(self, limit: int, current: int) -> None:
        super().__init__(f"field definition cap {limit} reached")
        self.limit = limit
        self.current = current


def catalog_id(tenant_id: str) -> UUID:
    return stream_id("field-catalog", tenant_id)


class FieldCatalog(Aggregate):
    """The set of a tenant's active definitions, across entities.

    Every define and delete also writes here, in the same atomic append, so two
    concurrent defines can never both slip under the cap.
    """

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        self.active: set[tuple[str, str]] = set()

    def claim(
        self, *, tenant_id: str, entity_name: str, field_key: str, limit: int | None, now: datetime
    ) -> None:
        if limit is not None and len(self.active) >= limit:
            raise CapExceeded(limit, len(self.active))
        self._trigger(
            FieldSlotClaimed, now, tenant_id=tenant_id, entity_name=entity_name, field_key=field_key
        )

    def release(self, *, tenant_id: str, entity_name: str, field_key: str, now: datetime) -> None:
        self._trigger(
            FieldSlotReleased,
            now,
            tenant_id=tenant_id,
            entity_name=entity_name,
            field_key=field_key,
        )

    def mutate(self, event: DomainEvent) -> None:
        if isinstance(event, FieldSlotClaimed):
            self.active.add((event.entity_name, event.field_key))
        elif isinstance(event, FieldSlotReleased):
            self.active.discard((event.entity_name, event.field_key))


EVENTS: tuple[type[DomainEvent], ...] = (
    FieldDefinitionDefined,
    FieldDefinitionUpdated,
    FieldDefinitionDeleted,
    FieldSlotClaimed,
    FieldSlotReleased,
)
