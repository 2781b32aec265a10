"""The custom-fields read model, as queries see it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


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
