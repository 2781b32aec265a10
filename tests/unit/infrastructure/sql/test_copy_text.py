"""COPY text: what PostgreSQL's text format reads back is exactly the rows given."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infrastructure.sql.copy_text import copy_text

_ESCAPES = {"\\\\": "\\", "\\t": "\t", "\\n": "\n", "\\r": "\r"}


def read_back(text: str) -> list[list[str | None]]:
    """PostgreSQL's reading of the text format (the subset copy_text writes)."""
    assert text.endswith("\n")
    rows = []
    for line in text[:-1].split("\n"):
        fields: list[str | None] = []
        for field in line.split("\t"):
            if field == "\\N":
                fields.append(None)
            else:
                fields.append(re.sub(r"\\.", lambda m: _ESCAPES[m.group(0)], field))
        rows.append(fields)
    return rows


def as_text(rows: list[tuple[str | int | None, ...]]) -> list[list[str | None]]:
    return [[None if v is None else str(v) for v in row] for row in rows]


@pytest.mark.parametrize(
    "value",
    ["a\tb", "line\nbreak", "cr\rhere", "back\\slash", "\\N", "\\", "\t\n\r\\", "", "é\u2028"],
)
def test_a_hostile_string_reads_back_as_itself(value: str) -> None:
    rows: list[tuple[str | int | None, ...]] = [("plain", 1, None), (value, 2, value)]
    assert read_back(copy_text(rows, 3)) == as_text(rows)


def test_a_string_spelled_like_null_stays_a_string() -> None:
    assert read_back(copy_text([("\\N", None)], 2)) == [["\\N", None]]


@given(
    st.lists(
        st.tuples(st.text(), st.one_of(st.none(), st.text()), st.integers(-(2**63), 2**63 - 1)),
        min_size=1,
    )
)
def test_any_rows_read_back_as_given(rows: list[tuple[str, str | None, int]]) -> None:
    assert read_back(copy_text(rows, 3)) == as_text(list(rows))


@pytest.mark.parametrize("value", [True, 1.5, b"bytes", ["a"]])
def test_a_value_of_another_type_is_refused(value: object) -> None:
    with pytest.raises(TypeError):
        copy_text([("a", value)], 2)


def test_rows_of_the_wrong_width_are_refused() -> None:
    with pytest.raises(ValueError):
        copy_text([("a", "b"), ("c",)], 2)
    with pytest.raises(ValueError):
        copy_text([("a", "b")], 3)


def test_no_rows_is_no_text() -> None:
    assert copy_text([], 4) == ""
