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


def _scalar_size(value: Any) -> int:
    """About what a scalar costs as JSON; exact enough to enforce a bound cheaply."""
    if isinstance(value, str):
        if len(value) > MAX_PAYLOAD_BYTES:
            return len(value)
        return len(value) + 2 if value.isascii() else len(value.encode(errors="replace")) + 2
    if isinstance(value, bool) or value is None:
        return 4
    if isinstance(value, int):
        return int(abs(value).bit_length() * _DIGITS_PER_BIT) + 1
    if isinstance(value, float):
        return len(repr(value))
    return 0


def _scalar_issue(value: Any) -> str | None:
    """What is wrong with a scalar, or None; "" for a container (not a scalar)."""
    if isinstance(value, str):
        return _string_issue(value)
    if isinstance(value, float):
        return None if math.isfinite(value) else "numbers must be finite"
    if value is None or isinstance(value, int):  # bool is an int
        return None
    if isinstance(value, dict | list | tuple):
        return ""
    return "not a JSON value"


def _join(base: str, key: Any) -> str:
    return f"{base}.{key}" if base else str(key)


def boundary_errors(raw: Any) -> list[dict[str, str]]:  # noqa: C901
    """Every offence against the generic rules, each with its path. The walk is
    iterative and stops at the first level past ``MAX_DEPTH`` and as soon as the size
    passes the bound, so a deep or a huge payload costs no more than the bounds."""
    too_large = [{"path": "(payload)", "message": f"larger than {MAX_PAYLOAD_BYTES} bytes"}]
    errors: list[dict[str, str]] = []
    size = 0
    issue = _scalar_issue(raw)
    if issue:
        return [{"path": "(payload)", "message": issue}]
    if issue is None:
        return [] if _scalar_size(raw) <= MAX_PAYLOAD_BYTES else too_large
    stack: list[tuple[str, Any, int]] = [("", raw, 1)]
    while stack:
        path, value, depth = stack.pop()
        where = path or "(payload)"
        if depth > MAX_DEPTH:
            errors.append({"path": where, "message": f"nested deeper than {MAX_DEPTH} levels"})
            continue
        is_dict = isinstance(value, dict)
        # Quotes, colon and comma of each member (a comma each in a list), up front.
        size += (4 if is_dict else 1) * len(value) + 2
        if size > MAX_PAYLOAD_BYTES:
            return too_large
        for key, child in value.items() if is_dict else enumerate(value):
            if is_dict:
                if not isinstance(key, str):
                    errors.append({"path": where, "message": "object keys must be strings"})
                    continue
                size += _scalar_size(key) - 2
                issue = _string_issue(key)
                if issue:
                    errors.append({"path": _printable(_join(path, key)), "message": issue})
                    continue
            issue = _scalar_issue(child)
            if issue == "":
                stack.append((_join(path, key), child, depth + 1))
                continue
            size += _scalar_size(child)
            if size > MAX_PAYLOAD_BYTES:
                return too_large
            if issue:
                errors.append({"path": _join(path, key), "message": issue})
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
