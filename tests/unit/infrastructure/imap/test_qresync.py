"""``VANISHED (EARLIER)`` parsed and bounded (``parse_vanished``), and the ranges it
becomes (``UidRanges``)."""

from __future__ import annotations

from typing import Any

from application.mail.resync import MAX_RANGES, UidRanges
from infrastructure.imap.qresync import parse_vanished


def test_ranges_and_single_uids_in_any_order_are_merged() -> None:
    ranges = parse_vanished([b"(EARLIER) 9:7,2,3,11", b"(EARLIER) 4"], uidnext=20)
    assert ranges is not None
    assert ranges.ranges == ((2, 4), (7, 9), (11, 11))
    assert [u for u in range(1, 13) if u in ranges] == [2, 3, 4, 7, 8, 9, 11]
    assert "3" not in ranges and ranges.highest == 11


def test_nothing_vanished_is_an_empty_answer() -> None:
    ranges = parse_vanished([], uidnext=5)
    assert ranges is not None and ranges.ranges == () and 1 not in ranges


def test_what_is_not_believed() -> None:
    lines: list[list[Any]] = [
        [b"(EARLIER) 1:2:3"],  # three bounds
        [b"(EARLIER) 1,,2"],  # an empty element
        [b"1:3"],  # not EARLIER
        [b"(EARLIER) 0:3"],  # UID 0
        [b"(EARLIER) 3:20"],  # at UIDNEXT
        [b"(EARLIER) 99999999999999999999"],  # past 2^32 - 1
        [b"(EARLIER) 1 2"],  # a space
        ["(EARLIER) 1"],  # not bytes
        [b"(EARLIER) " + b",".join(b"%d" % (2 * u + 1) for u in range(MAX_RANGES + 1))],
    ]
    for case in lines:
        assert parse_vanished(case, uidnext=20 if len(case[0]) < 100 else 10**9) is None, case
    assert parse_vanished([b"(EARLIER) 1"], uidnext=None) is None


def test_uid_ranges_contain_only_ints() -> None:
    ranges = UidRanges.of([(5, 5), (1, 2)])
    assert 1 in ranges and 5 in ranges and 4 not in ranges and 1.0 not in ranges
