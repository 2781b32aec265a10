"""Assertions on handler results, shared by the tests that call ``App.write``/``query``."""

from __future__ import annotations

from typing import Any

from application import Result


def ok(result: Result) -> dict[str, Any]:
    """The data of a successful result (fails the test with the error otherwise)."""
    assert result.is_success, result.error
    assert result.data is not None
    return result.data


def failed(result: Result, code: str, status: int) -> dict[str, Any]:
    """The details of a failed result with this code and status."""
    assert result.error is not None, f"expected {code}, got success {result.data}"
    assert (result.error.code, result.error.status) == (code, status), result.error
    return result.error.details
