"""The custom-fields read model, as queries see it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class CustomFieldsReadModel(Protocol):
    def list_definitions(self, tenant_id: str, entity_name: str | None) -> list[dict[str, Any]]:
        """Active tenant and system definitions, each with ``scope``."""
        ...

    def get_entity(
        self, tenant_id: str, entity_name: str, entity_id: str
    ) -> dict[str, Any] | None: ...

    def list_entities(
        self,
        tenant_id: str,
        entity_name: str,
        where: Mapping[str, Any],
        limit: int,
        after: str | None,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` entities ordered by id, after the id ``after``."""
        ...
