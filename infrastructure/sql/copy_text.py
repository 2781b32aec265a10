"""Rows as PostgreSQL ``COPY … FROM STDIN`` text: a tab between columns, a newline after
each row, ``\\N`` for NULL, and a backslash before any backslash, tab, newline or
carriage return inside a value.

A batch of projection rows travels faster this way than as parallel arrays: psycopg
dumps each array element through Python, and the server's ``unnest`` then rebuilds every
value; here one string is joined per row and the server parses its simplest format.
"""

from __future__ import annotations

from collections.abc import Sequence

_SPECIAL_CHARS = ("\\", "\t", "\n", "\r")
_SPECIAL = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _field(value: object) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, str):
        return value.translate(_SPECIAL)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"no COPY text for {type(value).__name__}")


def _column(values: Sequence[object]) -> list[str]:
    kinds = set(map(type, values))
    if kinds == {int}:
        return list(map(str, values))
    if kinds <= {str, type(None)}:
        texts = [value for value in values if isinstance(value, str)]
        joined = "".join(texts)
        # One scan of the whole column settles the common case: nothing to escape.
        if not any(char in joined for char in _SPECIAL_CHARS):
            if len(texts) == len(values):
                return texts
            return [value if isinstance(value, str) else "\\N" for value in values]
    return [_field(value) for value in values]


def copy_text(rows: Sequence[Sequence[object]], columns: int) -> str:
    """The COPY text of ``rows`` (each of ``columns`` values: str, int or None)."""
    if not rows:
        return ""
    by_column = list(zip(*rows, strict=True))
    if len(by_column) != columns:
        raise ValueError(f"rows of {len(by_column)} values for {columns} columns")
    lines = map("\t".join, zip(*map(_column, by_column), strict=True))
    return "\n".join(lines) + "\n"
