"""Custom-field values live on the host entity's own stream, one per (tenant, entity).

Each value remembers the definition generation it was validated against; a value
whose generation is not the definition's current one is dead (its definition was
deleted since), whatever order the events reach a reader in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from domain.events import Aggregate, DomainEvent
from domain.identity import stream_id


@dataclass(frozen=True, kw_only=True)
class CustomFieldValueSet(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.CustomFieldValueSet"

    tenant_id: str
    entity_name: str
    entity_id: str
    field_key: str
    definition_id: str
    generation: int
    value: Any


@dataclass(frozen=True, kw_only=True)
class CustomFieldValueCleared(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.CustomFieldValueCleared"

    tenant_id: str
    entity_name: str
    entity_id: str
    field_key: str
    definition_id: str
    generation: int


def entity_stream_id(tenant_id: str, entity_name: str, entity_id: str) -> UUID:
    return stream_id("entity", tenant_id, entity_name, entity_id)


class EntityCustomFields(Aggregate):
    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        # (field key, definition id, generation) -> value. Keyed by generation too: a
        # racing writer's value of a dead generation, stored after the live one, must not
        # hide the live value from a later clear.
        self.values: dict[tuple[str, str, int], Any] = {}

    def set_value(
        self,
        *,
        tenant_id: str,
        entity_name: str,
        entity_id: str,
        field_key: str,
        definition_id: UUID,
        generation: int,
        value: Any,
        now: datetime,
    ) -> None:
        self._trigger(
            CustomFieldValueSet,
            now,
            tenant_id=tenant_id,
            entity_name=entity_name,
            entity_id=entity_id,
            field_key=field_key,
            definition_id=str(definition_id),
            generation=generation,
            value=value,
        )

    def clear_value(
        self,
        *,
        tenant_id: str,
        entity_name: str,
        entity_id: str,
        field_key: str,
        definition_id: UUID,
        generation: int,
        now: datetime,
    ) -> bool:
        """Clear a live value; answer whether there was one (no event when not)."""
        if (field_key, str(definition_id), generation) not in self.values:
            return False
        self._trigger(
            CustomFieldValueCleared,
            now,
            tenant_id=tenant_id,
            entity_name=entity_name,
            entity_id=entity_id,
            field_key=field_key,
            definition_id=str(definition_id),
            generation=generation,
        )
        return True

    def mutate(self, event: DomainEvent) -> None:
        if isinstance(event, CustomFieldValueSet):
            self.values[event.field_key, event.definition_id, event.generation] = event.value
        elif isinstance(event, CustomFieldValueCleared):
            self.values.pop((event.field_key, event.definition_id, event.generation), None)


EVENTS: tuple[type[DomainEvent], ...] = (CustomFieldValueSet, CustomFieldValueCleared)
