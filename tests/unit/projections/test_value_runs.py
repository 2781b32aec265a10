"""A run of value events settled in memory: what the two statements then write."""

from __future__ import annotations

import json
from typing import Any

import pytest

from projections.value_runs import ValueOp, json_object, settle

LIVE = {("def-k", 1), ("def-j", 1)}


def _op(entity: str, key: str, cell: str | None, generation: int = 1) -> ValueOp:
    return ("t", "contact", entity, key, cell, f"def-{key}", generation)


def test_the_last_value_of_a_key_wins_and_a_clear_after_a_set_clears() -> None:
    cleared, upserts = settle(
        [
            _op("e1", "k", '{"s":"1"}'),
            _op("e1", "k", '{"s":"2"}'),
            _op("e1", "j", '{"s":"3"}'),
            _op("e1", "j", None),
        ],
        LIVE,
    )
    assert cleared == [("t", "contact", "e1", "j")]
    assert upserts == [(("t", "contact", "e1"), [("k", '{"s":"2"}')])]


def test_a_row_with_clears_only_is_not_created() -> None:
    cleared, upserts = settle([_op("e2", "k", None)], LIVE)
    assert cleared == [("t", "contact", "e2", "k")]
    assert upserts == []


def test_a_row_set_then_cleared_is_created_empty() -> None:
    cleared, upserts = settle([_op("e3", "k", '{"s":"1"}'), _op("e3", "k", None)], LIVE)
    assert cleared == [("t", "contact", "e3", "k")]
    assert upserts == [(("t", "contact", "e3"), [])]


def test_values_of_a_dead_definition_or_generation_are_passed_over() -> None:
    ops = [_op("e4", "k", '{"s":"1"}', generation=2), _op("e4", "gone", '{"s":"1"}')]
    assert settle(ops, LIVE) == ([], [])


def test_a_hostile_key_is_a_json_string() -> None:
    key = 'k"\\\n'
    assert json.loads(json_object([(key, '{"s":"1"}'), ("j", "2")])) == {key: {"s": "1"}, "j": 2}
    assert json_object([]) == "{}"


@pytest.mark.parametrize(
    "op",
    [
        ("t", "contact", {"not": "a string"}, "k", None, "def-k", 9),
        ("t", "contact", "e6", "k", None, "def-k", "x"),
        ("t", "contact", "e6", 5, '{"s":"1"}', "def-gone", 1),
        (None, "contact", "e6", "k", None, "def-gone", 1),
    ],
)
def test_a_malformed_dead_value_is_refused_not_passed_over(op: Any) -> None:
    with pytest.raises(TypeError):
        settle([op], LIVE)


def test_a_malformed_live_value_is_refused() -> None:
    with pytest.raises(TypeError):
        settle([("t", "contact", {"x": 1}, "k", '{"s":"1"}', "def-k", 1)], LIVE)  # type: ignore[list-item]
