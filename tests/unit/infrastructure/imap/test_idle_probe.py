"""Following a liveness probe's answer (DONE + IDLE) through what a server sends: only
the old IDLE's OK followed by the new "+ idling" is an answer; a refusal ends the
session; anything else a server sends in between — keepalives, news, junk — is not
taken for an answer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from infrastructure.imap.idle import IdleChannel


def channel() -> tuple[IdleChannel, Any]:
    client = SimpleNamespace(_idle_tag=b"A0007")
    conn: Any = SimpleNamespace(client=client)
    idle = IdleChannel(conn, frozenset({"IDLE"}), [])
    idle.idling = True
    idle._probe = (b"A0007", b"A0008")  # as ``probe`` leaves it
    return idle, client


def test_the_old_idles_ok_then_the_new_continuation_is_the_answer() -> None:
    idle, client = channel()
    assert idle._probe_answer([b"* OK Still here", b"A0007 OK Idle completed."]) is False
    assert idle._probe_answer([b"* 3 EXISTS", b"+ idling"]) is True
    assert client._idle_tag == b"A0008"  # the new IDLE is the one DONE ends
    assert idle._probe is None and idle.idling


@pytest.mark.parametrize(
    "lines",
    [
        [b"+ idling"],  # a continuation before the old IDLE ended: not ours
        [b"A0008 OK", b"* OK"],  # the new tag answered before the old one
        [b"x" * 100_000, b"\x00\xff", b"A00070 OK"],  # junk, and a longer tag
    ],
)
def test_nothing_else_is_taken_for_an_answer(lines: list[bytes]) -> None:
    idle, client = channel()
    assert idle._probe_answer(lines) is False
    assert client._idle_tag == b"A0007"


@pytest.mark.parametrize(
    "lines",
    [
        [b"A0007 NO not now"],
        [b"A0007 BAD what"],
        [b"A0007 OK done", b"A0008 BAD IDLE refused"],
        [b"A0007 OK done", b"A0008 NO no more"],
    ],
)
def test_a_refusal_of_either_command_is_no_answer(lines: list[bytes]) -> None:
    idle, _ = channel()
    assert idle._probe_answer(lines) is None
