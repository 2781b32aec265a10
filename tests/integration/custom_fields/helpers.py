"""Small helpers for the custom-field integration tests: write-or-fail, and a snapshot
of every query answer a set of users can see (to compare before/after a rebuild)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from application import Result, User
from application.app import App
from tests.support.results import ok


def define(
    app: App, user: User, key: str, field_type: str = "text", entity: str = "contact", **extra: Any
) -> Result:
    options = extra.pop("options", {})
    payload = {
        "entityName": entity,
        "fieldKey": key,
        "field": {"type": field_type, **options},
        **extra,
    }
    name = "define-system-field" if user.in_system_tenant else "define-tenant-field"
    return app.write(name, payload, user)


def delete(app: App, user: User, key: str, entity: str = "contact") -> Result:
    name = "delete-system-field" if user.in_system_tenant else "delete-tenant-field"
    return app.write(name, {"entityName": entity, "fieldKey": key}, user)


def set_value(
    app: App, user: User, entity_id: str, key: str, value: Any, entity: str = "contact"
) -> Result:
    return app.write(
        "set-custom-field",
        {"entityName": entity, "entityId": entity_id, "fieldKey": key, "value": value},
        user,
    )


def clear(app: App, user: User, entity_id: str, key: str, entity: str = "contact") -> Result:
    return app.write(
        "clear-custom-field", {"entityName": entity, "entityId": entity_id, "fieldKey": key}, user
    )


def fields_of(
    app: App, user: User, entity_id: str, entity: str = "contact"
) -> dict[str, Any] | None:
    """An entity's customFields, or None when get-entity answers 404."""
    result = app.query("get-entity", {"entityName": entity, "entityId": entity_id}, user)
    if result.error is not None:
        assert result.error.status == 404, result.error
        return None
    fields: dict[str, Any] = ok(result)["customFields"]
    return fields


def all_entities(
    app: App,
    user: User,
    entity: str = "contact",
    limit: int = 50,
    where: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every page of list-entities, concatenated."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        payload: dict[str, Any] = {"entityName": entity, "limit": limit}
        if where:
            payload["where"] = where
        if cursor:
            payload["cursor"] = cursor
        page = ok(app.query("list-entities", payload, user))
        items += page["items"]
        cursor = page["nextCursor"]
        if cursor is None:
            return items


def definitions(app: App, user: User, entity: str | None = None) -> list[dict[str, Any]]:
    payload = {} if entity is None else {"entityName": entity}
    items: list[dict[str, Any]] = ok(app.query("list-field-definitions", payload, user))["items"]
    return items


def snapshot(
    app: App,
    users: Iterable[User],
    entities: Iterable[str] = ("contact",),
    entity_ids: Iterable[str] = (),
) -> dict[str, Any]:
    """Every answer the read paths give these users — for before/after comparisons."""
    answers: dict[str, Any] = {}
    ids = list(entity_ids)
    for user in users:
        answers[f"{user.tenant_id}:definitions"] = definitions(app, user)
        for entity in entities:
            answers[f"{user.tenant_id}:{entity}:definitions"] = definitions(app, user, entity)
            answers[f"{user.tenant_id}:{entity}:list"] = all_entities(app, user, entity)
            answers[f"{user.tenant_id}:{entity}:list-paged"] = all_entities(
                app, user, entity, limit=2
            )
            for entity_id in ids:
                answers[f"{user.tenant_id}:{entity}:{entity_id}"] = fields_of(
                    app, user, entity_id, entity
                )
    return answers
