"""The generic boundary rules every payload passes before its schema: depth, size,
valid Unicode, no NUL, finite numbers, JSON types; each offence named by its path, and
the check itself bounded (iterative, stops at the bounds)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from application.custom_fields.set_custom_field import Payload as SetValue
from application.paging import BadCursor, decode_cursor, encode_cursor
from application.payloads import MAX_DEPTH, MAX_PAYLOAD_BYTES, boundary_errors, parse
from application.result import Result


def nested(levels: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def value_payload(value: Any) -> dict[str, Any]:
    return {"entityName": "c", "entityId": "e", "fieldKey": "k", "value": value}


def test_depth_up_to_the_bound_passes_and_one_more_is_named() -> None:
    assert boundary_errors({"v": nested(MAX_DEPTH - 1)}) == []
    assert boundary_errors({"v": nested(MAX_DEPTH)}) == [
        {"path": "v" + ".0" * (MAX_DEPTH - 1), "message": "nested deeper than 32 levels"}
    ]


def test_a_hundred_thousand_levels_cost_no_recursion_and_little_time() -> None:
    started = time.monotonic()
    errors = boundary_errors({"v": nested(100_000)})
    assert [e["message"] for e in errors] == ["nested deeper than 32 levels"]
    assert time.monotonic() - started < 5


def test_size_is_bounded_in_encoded_bytes() -> None:
    assert boundary_errors({"v": "x" * (MAX_PAYLOAD_BYTES - 100)}) == []
    too_big = [{"path": "(payload)", "message": "larger than 1048576 bytes"}]
    assert boundary_errors({"v": "x" * (MAX_PAYLOAD_BYTES + 1)}) == too_big
    assert boundary_errors({"v": "é" * (MAX_PAYLOAD_BYTES // 2 + 1)}) == too_big  # 2 bytes each
    assert boundary_errors({"v": [1] * 600_000}) == too_big
    assert boundary_errors({"v": 1 << (8 * MAX_PAYLOAD_BYTES)}) == too_big  # 2.5M digits
    assert boundary_errors({str(i): None for i in range(200_000)}) == too_big


@pytest.mark.parametrize(
    ("raw", "path", "message"),
    [
        ({"v": "\ud800"}, "v", "strings must be valid Unicode (no lone surrogates)"),
        ({"v": ["ok", "a\udfffb"]}, "v.1", "strings must be valid Unicode (no lone surrogates)"),
        ({"v": {"\ud83d": 1}}, "v.\\ud83d", "strings must be valid Unicode (no lone surrogates)"),
        ({"v": {"a\x00": 1}}, "v.a\\x00", "NUL characters are not allowed"),
        ({"v": float("nan")}, "v", "numbers must be finite"),
        ({"v": [float("-inf")]}, "v.0", "numbers must be finite"),
        ({"v": b"x"}, "v", "not a JSON value"),
        ({"v": {1: 2}}, "v", "object keys must be strings"),
    ],
)
def test_offences_are_named_by_a_printable_path(raw: Any, path: str, message: str) -> None:
    errors = boundary_errors(raw)
    assert errors == [{"path": path, "message": message}]
    path.encode()  # the answer itself can be encoded


def test_valid_unicode_of_every_plane_passes() -> None:
    assert boundary_errors({"v": "\U0001f600 ž \u2028 \ufeff", "w": 2**64, "x": -1.5e308}) == []


def test_parse_runs_the_boundary_before_the_schema() -> None:
    result = parse(SetValue, value_payload(nested(1000)))
    assert isinstance(result, Result) and result.error is not None
    assert (result.error.status, result.error.code) == (400, "invalid_payload")
    assert [e["message"] for e in result.error.details["errors"]] == [
        "nested deeper than 32 levels"
    ]


@pytest.mark.parametrize(
    "key", ["a\x00", "a\ud800", {"deep": nested(100)}, 10**5000], ids=["nul", "sur", "deep", "big"]
)
def test_cursors_decoding_to_hostile_data_are_bad_cursors(key: Any) -> None:
    raw = json.dumps(key).encode() if not isinstance(key, int) else b"1" * 5000
    cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    with pytest.raises(BadCursor):
        decode_cursor(cursor)


def test_a_cursor_round_trips_and_an_overlong_one_is_bad() -> None:
    assert decode_cursor(encode_cursor(["2026-01-01", "m-1"])) == ["2026-01-01", "m-1"]
    with pytest.raises(BadCursor):
        decode_cursor("A" * 5000)
    with pytest.raises(BadCursor):
        decode_cursor("%%%")
