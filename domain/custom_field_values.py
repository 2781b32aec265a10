"""Custom-field values live on the host entity's own stream, one per (tenant, entity).

Each value remembers the definition generation it was validated against; a value
whose generation is not the definition's current one is dead (its definition was
deleted since), whatever order the events reach a reader in.

Values are sealed before they reach an event (version 2): ``sealed`` is a token under the
tenant's key, bound to the entity and the key, and ``digest`` a keyed digest of the
value's ``digest_form`` for equality filters. Version 1 events carried the plaintext
``value``; the upcaster keeps it readable as ``plain:`` text in both fields (what a
``plain:`` cell holds was already in the stored event, so nothing is revealed by it).

Retention: a live value remembers when it was last set; ``expire_value`` records a
``CustomFieldValueExpired`` for it only if that set is at or before the cutoff it is
given, so an expiry is recorded once (a second sweeper finds the value gone, or
anonymized, which never expires again) and a value set again since is kept. ``delete``
removes the value; ``anonymize`` replaces it by its type's anonymous form, sealed
(``sealed``/``digest``), or removes it when the type has none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from domain.events import Aggregate, DomainEvent
from domain.identity import stream_id

PLAIN = "plain:"  # a version 1 value, upcast: not sealed


def canonical_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def digest_form(value: Any) -> str:
    """The text equal values share: numbers as floats (``1`` equals ``1.0``, as in the
    stored JSON's own comparison; integers are bounded to +-(2^53 - 1), so exactly)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return repr(float(value))
        except OverflowError:  # an integer past any float: only an old event holds one
            return canonical_json(value)
    return canonical_json(value)


@dataclass(frozen=True, kw_only=True)
class CustomFieldValueSet(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.CustomFieldValueSet"
    CLASS_VERSION: ClassVar[int] = 2

    tenant_id: str
    entity_name: str
    entity_id: str
    field_key: str
    definition_id: str
    generation: int
    sealed: str
    digest: str

    @staticmethod
    def upcast_v1(state: dict[str, Any]) -> dict[str, Any]:
        value = state.pop("value")
        state["sealed"] = PLAIN + canonical_json(value)
        state["digest"] = PLAIN + digest_form(value)
        return state


@dataclass(frozen=True, kw_only=True)
class CustomFieldValueCleared(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.CustomFieldValueCleared"

    tenant_id: str
    entity_name: str
    entity_id: str
    field_key: str
    definition_id: str
    generation: int


@dataclass(frozen=True, kw_only=True)
class CustomFieldValueExpired(DomainEvent):
    TOPIC: ClassVar[str] = "tidings.fields.CustomFieldValueExpired"

    tenant_id: str
    entity_name: str
    entity_id: str
    field_key: str
    definition_id: str
    generation: int
    action: str  # "delete" | "anonymize" (domain.retention.Action)
    set_at: str  # ISO time of the set that expired
    sealed: str | None  # the anonymous form, sealed; None: the value is removed
    digest: str | None


def entity_stream_id(tenant_id: str, entity_name: str, entity_id: str) -> UUID:
    return stream_id("entity", tenant_id, entity_name, entity_id)


class EntityCustomFields(Aggregate):
    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(aggregate_id)
        # (field key, definition id, generation) -> sealed value. Keyed by generation too: a
        # racing writer's value of a dead generation, stored after the live one, must not
        # hide the live value from a later clear.
        self.values: dict[tuple[str, str, int], Any] = {}
        # The same key -> when its value was set; None once anonymized (never expires).
        self.set_at: dict[tuple[str, str, int], datetime | None] = {}

    @classmethod
    def at(cls, aggregate_id: UUID, version: int) -> EntityCustomFields:
        """The entity at ``version`` as a read model knows it, its values told by
        ``know``: enough to decide expiries. What it records claims ``version + 1`` on,
        so if the stream has moved past ``version`` the append conflicts, and the
        caller decides again from the stream itself."""
        entity = cls(aggregate_id)
        entity.version = version
        return entity

    def know(
        self, *, field_key: str, definition_id: str, generation: int, set_at: datetime
    ) -> None:
        """A live value the read model holds, set at ``set_at`` (its sealed form unknown)."""
        key = (field_key, definition_id, generation)
        self.values[key] = None
        self.set_at[key] = set_at

    def set_value(
        self,
        *,
        tenant_id: str,
        entity_name: str,
        entity_id: str,
        field_key: str,
        definition_id: UUID,
        generation: int,
        sealed: str,
        digest: str,
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
            sealed=sealed,
            digest=digest,
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

    def expire_value(
        self,
        *,
        tenant_id: str,
        entity_name: str,
        entity_id: str,
        field_key: str,
        definition_id: UUID,
        generation: int,
        action: str,
        cutoff: datetime,
        anonymous: tuple[str, str] | None,
        now: datetime,
    ) -> bool:
        """Expire a live value set at or before ``cutoff``; answer whether it was one.
        ``anonymous``: the sealed anonymous form (token, digest) an ``anonymize`` leaves."""
        set_at = self.set_at.get((field_key, str(definition_id), generation))
        if set_at is None or set_at > cutoff:
            return False
        kept = anonymous if action == "anonymize" else None
        self._trigger(
            CustomFieldValueExpired,
            now,
            tenant_id=tenant_id,
            entity_name=entity_name,
            entity_id=entity_id,
            field_key=field_key,
            definition_id=str(definition_id),
            generation=generation,
            action=action,
            set_at=set_at.isoformat(),
            sealed=None if kept is None else kept[0],
            digest=None if kept is None else kept[1],
        )
        return True

    def mutate(self, event: DomainEvent) -> None:
        if isinstance(event, CustomFieldValueSet):
            key = (event.field_key, event.definition_id, event.generation)
            self.values[key] = event.sealed
            self.set_at[key] = event.timestamp
        elif isinstance(event, CustomFieldValueCleared):
            key = (event.field_key, event.definition_id, event.generation)
            self.values.pop(key, None)
            self.set_at.pop(key, None)
        elif isinstance(event, CustomFieldValueExpired):
            key = (event.field_key, event.definition_id, event.generation)
            if event.sealed is None:
                self.values.pop(key, None)
                self.set_at.pop(key, None)
            else:
                self.values[key] = event.sealed
                self.set_at[key] = None


EVENTS: tuple[type[DomainEvent], ...] = (
    CustomFieldValueSet,
    CustomFieldValueCleared,
    CustomFieldValueExpired,
)
