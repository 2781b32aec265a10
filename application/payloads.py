"""Payload schemas: camelCase on the wire (snake_case accepted), strict types, unknown
keys refused. A schema violation becomes a 400 with one entry per offending field.

Before any schema, every payload passes the generic rules that keep the store's round
trip exact for every handler and query alike (ids, cursors, ``where``, secrets…): at
most ``MAX_DEPTH`` levels of nesting and ``MAX_PAYLOAD_BYTES`` encoded, strings of valid
Unicode (no lone surrogates) without NUL, finite numbers, JSON types only. See
docs/fault-isolation.md.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from application.result import Result, invalid_payload

MAX_DEPTH = 32
MAX_PAYLOAD_BYTES = 1024 * 1024
# Decimal digits per bit of an integer's magnitude (log10 2), for its encoded length.
_DIGITS_PER_BIT = 0.30103


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


def _printable(text: str) -> str:
    """A path fit to answer with, even when a key it names holds NUL or a surrogate."""
    return text.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")


def _string_issue(value: str) -> str | None:
    if "\x00" in value:
        return "NUL characters are not allowed"
    try:
        value.encode()
    except UnicodeEncodeError:
        return "strings must be valid Unicode (no lone surrogates)"
    return None


def _encoded_size(value: Any) -> int:
    """Roughly what the value costs as JSON; exact enough to enforce a bound."""
    if isinstance(value, str):
        if len(value) > MAX_PAYLOAD_BYTES:
            return len(value)
        return len(value.encode(errors="replace")) + 2
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return int(abs(value).bit_length() * _DIGITS_PER_BIT) + 2
    if isinstance(value, float):
        return 24
    return 2


def boundary_errors(raw: Any) -> list[dict[str, str]]:
    """Every offence against the generic rules, each with its path; the walk is
    iterative and stops at the first level past ``MAX_DEPTH`` or byte past the size, so
    neither a deep nor a huge payload can cost more than the bounds themselves."""
    errors: list[dict[str, str]] = []
    size = 0
    stack: list[tuple[str, Any, int]] = [("", raw, 0)]
    while stack:
        path, value, depth = stack.pop()
        where = path or "(payload)"
        size += _encoded_size(value)
        if size > MAX_PAYLOAD_BYTES:
            return [
                {"path": "(payload)", "message": f"larger than {MAX_PAYLOAD_BYTES} bytes"}
            ]
        if isinstance(value, str):
            issue = _string_issue(value)
            if issue:
                errors.append({"path": where, "message": issue})
            continue
        if isinstance(value, float) and not math.isfinite(value):
            errors.append({"path": where, "message": "numbers must be finite"})
            continue
        if value is None or isinstance(value, bool | int | float):
            continue
        if isinstance(value, dict):
            items: list[tuple[Any, Any]] = list(value.items())
        elif isinstance(value, list | tuple):
            items = list(enumerate(value))
        else:
            errors.append({"path": where, "message": "not a JSON value"})
            continue
        if depth >= MAX_DEPTH:
            errors.append({"path": where, "message": f"nested deeper than {MAX_DEPTH} levels"})
            continue
        for key, child in reversed(items):
            if isinstance(value, dict):
                if not isinstance(key, str):
                    errors.append({"path": where, "message": "object keys must be strings"})
                    continue
                size += _encoded_size(key) + 1
                issue = _string_issue(key)
                if issue:
                    child_path = _printable(f"{path}.{key}" if path else key)
                    errors.append({"path": child_path, "message": issue})
                    continue
            child_path = f"{path}.{key}" if path else str(key)
            stack.append((child_path, child, depth + 1))
    return errors


def parse(schema: type[P], raw: Any) -> P | Result:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return invalid_payload([{"path": "(payload)", "message": "expected a JSON object"}])
    errors = boundary_errors(raw)
    if errors:
        return invalid_payload(errors)
    try:
        return schema.model_validate(raw)
    except ValidationError as error:
        return invalid_payload(
            [{"path": _path(e["loc"]), "message": e["msg"]} for e in error.errors()]
        )
