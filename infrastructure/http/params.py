"""Query parameters, bounded before use."""

from __future__ import annotations

from fastapi import Request

from infrastructure.http import problems
from infrastructure.http.door import Refused

MAX_SEQUENCE = 2**53 - 1


def int_param(
    request: Request, name: str, default: int, bounds: tuple[int, int], *, given: str | None = None
) -> int:
    low, high = bounds
    text = request.query_params.get(name, given)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit() and len(text) <= 16) or not low <= int(text) <= high:
        raise Refused(
            problems.fail(
                "invalid_payload",
                400,
                "the request is invalid",
                errors=[{"path": name, "message": f"an integer from {low} to {high}"}],
            )
        )
    return int(text)
