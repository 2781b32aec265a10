"""Opaque list cursors: base64url of the last item's sort key."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any, TypeVar

from application.payloads import boundary_errors

T = TypeVar("T")

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class BadCursor(ValueError):
    pass


def encode_cursor(key: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def take_page(rows: list[T], limit: int, key: Callable[[T], Any]) -> tuple[list[T], str | None]:
    """Rows fetched with ``limit + 1``: the page, and the cursor to the next one."""
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, encode_cursor(key(page[-1]))


MAX_CURSOR_CHARS = 4096


def decode_cursor(cursor: str) -> Any:
    """The sort key inside a cursor. A cursor is caller input: what it decodes to obeys
    the payload rules too (no NUL or lone surrogate reaches a query parameter)."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise BadCursor(cursor[:64])
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        key = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeError, RecursionError):
        raise BadCursor(cursor) from None
    if boundary_errors(key):
        raise BadCursor(cursor)
    return key
