"""The custom-fields read model, as queries see it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from domain.retention import Retention


@dataclass(frozen=True)
class Match:
    """What an equality filter matches in a key's cells: a sealed cell whose digest is one
    of ``digests`` (keyed, or the ``plain:`` one of an upcast value), or a cell written
    before values were sealed that holds ``value`` itself."""

    digests: tuple[str, ...]
    value: Any


class CustomFieldsReadModel(Protocol):
    def list_definitions(self, tenant_id: str, entity_name: str | None) -> list[dict[str, Any]]:
        """Active tenant and system definitions, each with ``scope``."""
        ...

    def get_entity(self, tenant_id: str, entity_name: str, entity_id: str) -> dict[str, Any] | None:
        """``customFields`` holds the sealed cells (``application.custom_fields.sealing``)."""
        ...

    def list_entities(
        self,
        tenant_id: str,
        entity_name: str,
        where: Mapping[str, Match],
        limit: int,
        after: str | None,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` entities ordered by id, after the id ``after``; cells sealed."""
        ...


@dataclass(frozen=True)
class RetainedDefinition:
    """A live definition with a retention, as the sweeper needs it."""

    definition_id: str
    generation: int
    field: dict[str, Any]  # the definition's ``field`` (type and options)
    retention: Retention


# Where a due value lies in its definition's walk: (tenant, entity name, entity id, key).
Position = tuple[str, str, str, str]


@dataclass(frozen=True)
class DueValue:
    """A live value whose set time is at or before its definition's cutoff."""

    tenant_id: str
    entity_name: str
    entity_id: str
    field_key: str
    definition_id: str
    generation: int
    set_at: int  # microseconds since the epoch
    # The entity stream's version the read model reflects (None: not known; the
    # sweeper then loads the stream).
    version: int | None = None

    @property
    def position(self) -> Position:
        """Where the value lies in its definition's walk (its key)."""
        return (self.tenant_id, self.entity_name, self.entity_id, self.field_key)


class ExpiringValues(Protocol):
    """The read side of value retention (``projections.value_clock``)."""

    def retained_definitions(self) -> list[RetainedDefinition]: ...

    def due(
        self, definition: RetainedDefinition, cutoff: int, after: Position | None, limit: int
    ) -> list[DueValue]:
        """The values of a live definition's generation set at or before ``cutoff``
        (microseconds), past ``after`` in ``DueValue.position`` order, at most ``limit``:
        one statement, a range scan of the clock's key."""
        ...
