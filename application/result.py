"""What every handler and query answers: a success with data, or an error that an
HTTP layer can pass through unchanged (``status`` is the HTTP-like code)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Error:
    code: str
    status: int
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    data: dict[str, Any] | None = None
    error: Error | None = None

    @property
    def is_success(self) -> bool:
        return self.error is None

    @staticmethod
    def ok(data: dict[str, Any] | None = None) -> Result:
        return Result(data=data if data is not None else {})

    @staticmethod
    def fail(code: str, status: int, message: str, **details: Any) -> Result:
        return Result(error=Error(code=code, status=status, message=message, details=details))


def invalid_payload(errors: list[dict[str, str]]) -> Result:
    return Result.fail("invalid_payload", 400, "the payload is invalid", errors=errors)


def forbidden() -> Result:
    return Result.fail("forbidden", 403, "your roles do not allow this")


def not_found(what: str) -> Result:
    return Result.fail("not_found", 404, f"{what} not found")


def version_conflict(message: str = "a concurrent write changed this first") -> Result:
    return Result.fail("version_conflict", 409, message)
