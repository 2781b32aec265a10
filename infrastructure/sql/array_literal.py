"""PostgreSQL array literals built by hand, for the store's per-command statements.

psycopg dumps a list element by element through its dumpers: about 20 µs of the
client's CPU for the eight arrays of one checked insert, against about 4 µs to join
the same values into array literals, which the server parses as cheaply. A command on
PostgreSQL costs about 0.18 ms of client CPU, so this is a tenth of it. Text elements are
quoted and escaped, so any string is safe; ``plain`` is only for values whose text is
digits, letters and dashes (ints, UUIDs)."""

from __future__ import annotations

from collections.abc import Iterable


def plain(values: Iterable[int | object]) -> str:
    """``{1,2,3}``: ints or UUIDs (their text needs no quoting)."""
    return "{" + ",".join(map(str, values)) + "}"


def quoted(values: Iterable[str]) -> str:
    """``{"a","b"}``: any text, each element quoted with its backslashes and quotes
    escaped (a quoted ``NULL`` is the text, not a null)."""
    return (
        "{"
        + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
        + "}"
    )
