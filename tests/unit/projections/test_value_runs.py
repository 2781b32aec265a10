"""A run of value events settled in memory: what the statements then write, and each
row's stream version after the run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from projections.value_runs import ValueOp, json_object, settle

LIVE = {("def-k", 1), ("def-j", 1)}


def _op(entity: str, key: str, cell: str | None, generation: int = 1, version: int = 1) -> ValueOp:
    return ("t", "contact", entity, key, cell, f"def-{key}", generation, version)


def test_the_last_value_of_a_key_wins_and_a_clear_after_a_set_clears() -> None:
    cleared, upserts, versions = settle(
        [
            _op("e1", "k", '{"s":"1"}', version=1),
            _op("e1", "k", '{"s":"2"}', version=2),
            _op("e1", "j", '{"s":"3"}', version=3),
            _op("e1", "j", None, version=4),
        ],
        LIVE,
    )
    assert cleared == [("t", "contact", "e1", "j")]
    assert upserts == [(("t", "contact", "e1"), [("k", '{"s":"2"}')])]
    assert versions == {("t", "contact", "e1"): 4}


def test_a_row_with_clears_only_is_not_created() -> None:
    cleared, upserts, versions = settle([_op("e2", "k", None, version=7)], LIVE)
    assert cleared == [("t", "contact", "e2", "k")]
    assert upserts == []
    assert versions == {("t", "contact", "e2"): 7}


def test_a_row_set_then_cleared_is_created_empty() -> None:
    cleared, upserts, _ = settle(
        [_op("e3", "k", '{"s":"1"}'), _op("e3", "k", None, version=2)], LIVE
    )
    assert cleared == [("t", "contact", "e3", "k")]
    assert upserts == [(("t", "contact", "e3"), [])]


def test_values_of_a_dead_definition_or_generation_are_passed_over() -> None:
    ops = [
        _op("e4", "k", '{"s":"1"}', generation=2, version=5),
        _op("e4", "gone", '{"s":"1"}', version=6),
    ]
    # Their cells are passed over; the stream they moved still has its version.
    assert settle(ops, LIVE) == ([], [], {("t", "contact", "e4"): 6})


def test_a_hostile_key_is_a_json_string() -> None:
    key = 'k"\\\n'
    assert json.loads(json_object([(key, '{"s":"1"}'), ("j", "2")])) == {key: {"s": "1"}, "j": 2}
    assert json_object([]) == "{}"


@pytest.mark.parametrize(
    "op",
    [
        ("t", "contact", {"not": "a string"}, "k", None, "def-k", 9, 1),
        ("t", "contact", "e6", "k", None, "def-k", "x", 1),
        ("t", "contact", "e6", 5, '{"s":"1"}', "def-gone", 1, 1),
        (None, "contact", "e6", "k", None, "def-gone", 1, 1),
        ("t", "contact", "e6", "k", None, "def-gone", 1, "2"),
    ],
)
def test_a_malformed_dead_value_is_refused_not_passed_over(op: Any) -> None:
    with pytest.raises(TypeError):
        settle([op], LIVE)


def test_a_malformed_live_value_is_refused() -> None:
    with pytest.raises(TypeError):
        settle([("t", "contact", {"x": 1}, "k", '{"s":"1"}', "def-k", 1, 1)], LIVE)  # type: ignore[list-item]
