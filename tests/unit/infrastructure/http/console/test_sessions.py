"""The console's sessions: bounded per key and in all, ended by lifetime and idleness,
by sign-out and by their key; streams capped per session and per tenant; CSRF tokens
compared whole."""

from __future__ import annotations

from infrastructure.http.console.sessions import Sessions, SessionSettings

SETTINGS = SessionSettings(
    total=4, per_key=2, lifetime=100.0, idle=10.0, streams_per_session=2, streams_per_tenant=3
)


def test_a_key_holds_at_most_per_key_sessions_the_oldest_going_first() -> None:
    sessions = Sessions(SETTINGS)
    first = sessions.open("k1", "t1", "key", 0.0)
    second = sessions.open("k1", "t1", "key", 1.0)
    third = sessions.open("k1", "t1", "key", 2.0)
    assert sessions.get(first.id, 3.0) is None and first.ended
    assert sessions.get(second.id, 3.0) is second and sessions.get(third.id, 3.0) is third


def test_at_most_total_sessions_in_all() -> None:
    sessions = Sessions(SETTINGS)
    opened = [sessions.open(f"k{n}", "t1", "key", float(n)) for n in range(6)]
    assert len(sessions) == 4
    assert [sessions.get(s.id, 6.0) is not None for s in opened] == [False] * 2 + [True] * 4


def test_lifetime_and_idleness_end_a_session() -> None:
    sessions = Sessions(SETTINGS)
    idle = sessions.open("k1", "t1", "key", 0.0)
    assert sessions.get(idle.id, 10.0) is None  # idle 10 s
    busy = sessions.open("k2", "t1", "key", 0.0)
    for now in range(5, 100, 5):
        assert sessions.get(busy.id, float(now)) is busy
    assert sessions.get(busy.id, 100.0) is None  # lifetime, however busy
    assert sessions.get(None, 0.0) is None and sessions.get("made-up", 0.0) is None


def test_ending_a_key_ends_its_sessions_only() -> None:
    sessions = Sessions(SETTINGS)
    mine, theirs = sessions.open("k1", "t1", "key", 0.0), sessions.open("k2", "t1", "key", 0.0)
    sessions.end_key("k1")
    assert mine.ended and sessions.get(mine.id, 1.0) is None
    assert sessions.get(theirs.id, 1.0) is theirs
    sessions.end(theirs)
    assert theirs.ended and len(sessions) == 0


def test_streams_are_capped_per_session_and_per_tenant() -> None:
    sessions = Sessions(SETTINGS)
    a, b = sessions.open("k1", "t1", "key", 0.0), sessions.open("k2", "t1", "key", 0.0)
    assert sessions.take_stream(a) and sessions.take_stream(a)
    assert not sessions.take_stream(a)  # two a session
    assert sessions.take_stream(b)
    assert not sessions.take_stream(b)  # three a tenant
    other = sessions.open("k3", "t2", "key", 0.0)
    assert sessions.take_stream(other)
    sessions.give_stream(a)
    assert sessions.take_stream(b)
    sessions.end(b)
    assert not sessions.take_stream(b)  # an ended session opens none


def test_csrf_tokens_are_compared_whole() -> None:
    session = Sessions(SETTINGS).open("k1", "t1", "key", 0.0)
    assert session.csrf_matches(session.csrf)
    for token in (None, "", session.csrf[:-1], session.csrf + "x", "é" + session.csrf[1:]):
        assert not session.csrf_matches(token)
