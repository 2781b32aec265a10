"""Opaque list cursors: base64url of the last item's sort key."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any, TypeVar

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


def decode_cursor(cursor: str) -> Any:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        return json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadCursor(cursor) from None
