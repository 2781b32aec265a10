"""The deadline thread wakes only for a new first deadline, and still shuts every armed
socket down at its own deadline, never a disarmed one."""

from __future__ import annotations

import socket
import time

from infrastructure.smtp.watchdog import Watchdog


def _shut_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the peer's socket is shut down (a read ends) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_an_earlier_deadline_than_the_first_wakes_the_thread() -> None:
    watchdog = Watchdog()
    late, late_peer = socket.socketpair()
    soon, soon_peer = socket.socketpair()
    with late, late_peer, soon, soon_peer:
        watchdog.arm(time.monotonic() + 30, late)
        time.sleep(0.2)  # the thread has started and sleeps for 30 s
        started = time.monotonic()
        watchdog.arm(started + 0.2, soon)
        assert _shut_within(soon_peer, 5)
        assert time.monotonic() - started < 5
        assert not _shut_within(late_peer, 0.1)


def test_later_deadlines_are_each_kept_without_a_wake() -> None:
    watchdog = Watchdog()
    pairs = [socket.socketpair() for _ in range(3)]
    started = time.monotonic()
    try:
        for n, (sock, _) in enumerate(pairs):
            watchdog.arm(started + 0.2 * (n + 1), sock)
        for n, (_, peer) in enumerate(pairs):
            assert _shut_within(peer, 5)
            assert time.monotonic() - started >= 0.2 * (n + 1) - 0.01
    finally:
        for sock, peer in pairs:
            sock.close()
            peer.close()


def test_a_disarmed_socket_is_left_open() -> None:
    watchdog = Watchdog()
    first, first_peer = socket.socketpair()
    kept, kept_peer = socket.socketpair()
    with first, first_peer, kept, kept_peer:
        watchdog.disarm(watchdog.arm(time.monotonic() + 0.1, first))
        watchdog.arm(time.monotonic() + 0.3, kept)
        assert _shut_within(kept_peer, 5)
        assert not _shut_within(first_peer, 0.1)
