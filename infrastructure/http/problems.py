"""Errors as ``application/problem+json`` (RFC 9457), carrying the Result's own code,
status and details, so an HTTP client sees what a Python caller sees."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from application.result import Error

MEDIA_TYPE = "application/problem+json"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "code", "details"],
    "properties": {
        "type": {"type": "string", "description": "urn:tidings:error:<code>"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "code": {"type": "string"},
        "details": {"type": "object"},
    },
}


def problem(error: Error, headers: dict[str, str] | None = None) -> Response:
    body = {
        "type": f"urn:tidings:error:{error.code}",
        "title": error.message,
        "status": error.status,
        "code": error.code,
        "details": error.details,
    }
    return Response(orjson.dumps(body), error.status, headers, MEDIA_TYPE)


def fail(code: str, status: int, message: str, **details: Any) -> Response:
    return problem(Error(code=code, status=status, message=message, details=details))
