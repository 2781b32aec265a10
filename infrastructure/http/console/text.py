"""How a stored value is shown: bounded in length and free of control characters.

Escaping is the templates' (autoescape); this keeps a 10 KB display name from
flooding a table and a control character (a NUL, an ESC, a bidi override) from
reaching the page, where it could hide or reorder what an operator reads.
"""

from __future__ import annotations

import unicodedata
from typing import Any

MAX_SHOWN = 200


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    if value is None:
        return "-"
    text = "".join(
        "\ufffd" if unicodedata.category(c) in ("Cc", "Cf") and c not in " " else c
        for c in str(value)[: limit + 1]
    )
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def cleaned(text: str, limit: int) -> str:
    """Typed text (a search) cut to ``limit`` without its control characters."""
    return "".join(c for c in text[:limit] if unicodedata.category(c) not in ("Cc", "Cf"))
