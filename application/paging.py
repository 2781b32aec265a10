"""Opaque list cursors: base64url of the last item's sort key."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class BadCursor(ValueError):
    pass


def encode_cursor(key: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Any:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        return json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadCursor(cursor) from None
