"""Payload schemas: camelCase on the wire (snake_case accepted), strict types, unknown
keys refused. A schema violation becomes a 400 with one entry per offending field."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from application.result import Result, invalid_payload


class Payload(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        frozen=True,
    )


class EmptyPayload(Payload):
    pass


P = TypeVar("P", bound=Payload)


def _path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(payload)"


def _nul_errors(value: Any, path: str = "") -> list[dict[str, str]]:
    """NUL characters cannot be stored (PostgreSQL text and jsonb refuse them): one such
    value would stop the projections for good, so it is refused at the door."""
    if isinstance(value, str):
        if "\x00" in value:
            return [{"path": path or "(payload)", "message": "NUL characters are not allowed"}]
        return []
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list | tuple):
        items = list(enumerate(value))
    else:
        return []
    errors: list[dict[str, str]] = []
    for key, child in items:
        child_path = f"{path}.{key}" if path else str(key)
        errors += _nul_errors(key, child_path) + _nul_errors(child, child_path)
    return errors


def parse(schema: type[P], raw: Any) -> P | Result:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return invalid_payload([{"path": "(payload)", "message": "expected a JSON object"}])
    nul = _nul_errors(raw)
    if nul:
        return invalid_payload(nul)
    try:
        return schema.model_validate(raw)
    except ValidationError as error:
        return invalid_payload(
            [{"path": _path(e["loc"]), "message": e["msg"]} for e in error.errors()]
        )
