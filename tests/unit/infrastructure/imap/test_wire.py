"""The guarded connection of ``wire`` on a local socket pair (no server): the total
deadline is checked before every read, literals over the cap are never allocated, and
one operation's buffering is bounded."""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from application.mail.ports import MailboxTimeout
from infrastructure.imap import wire as wire_module
from infrastructure.imap.errors import Phase, classify
from infrastructure.imap.wire import (
    DeadlinePassed,
    GuardedIO,
    Limits,
    ResponseTooLarge,
    Wire,
    _PlainIMAP,
    mend_refused,
    shared_capabilities,
)


class Guarded(GuardedIO):
    """The reading half of ``wire``'s imaplib subclasses, on a given socket."""

    def __init__(self, sock: socket.socket, wire: Wire) -> None:
        self.sock, self._wire, self._inbuf = sock, wire, bytearray()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    ours.settimeout(30.0)  # the per-read timeout: far longer than any deadline here
    yield ours, theirs
    ours.close()
    theirs.close()


def drip(sock: socket.socket, data: bytes, every: float) -> threading.Thread:
    def run() -> None:
        for i in range(len(data)):
            try:
                sock.sendall(data[i : i + 1])
            except OSError:
                return
            time.sleep(every)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_drip_is_cut_at_the_operations_deadline(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    wire = Wire(Limits(literal_bytes=1024, response_bytes=1 << 20))
    io = Guarded(ours, wire)
    drip(theirs, b"* OK " + b"x" * 100 + b"\r\n", every=0.1)
    started = time.monotonic()
    with pytest.raises(DeadlinePassed), wire.operation(0.5):
        io.readline()
    assert 0.4 < time.monotonic() - started < 2.0
    assert ours.gettimeout() == 30.0  # the socket's own timeout is left as it was


def test_the_sessions_deadline_caps_a_longer_operation(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _ = pair
    wire = Wire(Limits(1024, 1 << 20), session_expires=time.monotonic() + 0.3)
    with pytest.raises(DeadlinePassed), wire.operation(60.0):
        Guarded(ours, wire).readline()


def test_outside_an_operation_reads_keep_the_sockets_own_mode(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    io = Guarded(ours, Wire(Limits(1024, 1 << 20)))
    theirs.sendall(b"* 1 EXISTS\r\n* partial")
    assert io.readline() == b"* 1 EXISTS\r\n"
    ours.setblocking(False)  # an idling watch reads what there is
    with pytest.raises(BlockingIOError):
        io.readline()
    theirs.sendall(b" line\r\n")
    time.sleep(0.05)
    assert io.readline() == b"* partial line\r\n"  # nothing read earlier is lost


def test_a_literal_over_the_cap_is_discarded_unread_and_counted(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    wire = Wire(Limits(literal_bytes=1024, response_bytes=1 << 20))
    io = Guarded(ours, wire)
    theirs.sendall(b"y" * 5000 + b")\r\n")
    with wire.operation(5.0):
        assert io.read(5000) == b""
        assert io.readline() == b")\r\n"  # the stream stays in step
    assert wire.take_refused() == 1 and wire.take_refused() == 0


def test_a_literal_within_the_cap_is_read_whole(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    wire = Wire(Limits(literal_bytes=1 << 20, response_bytes=4 << 20))
    io = Guarded(ours, wire)
    body = bytes(range(256)) * 1000
    sender = threading.Thread(target=theirs.sendall, args=(b"* 1 FETCH {3}\r\n" + body,))
    sender.start()
    with wire.operation(5.0):
        assert io.readline() == b"* 1 FETCH {3}\r\n"
        assert io.read(len(body)) == body
    sender.join()
    assert wire.take_refused() == 0


def test_one_operation_buffers_at_most_its_budget(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    wire = Wire(Limits(literal_bytes=64 * 1024, response_bytes=100 * 1024))
    io = Guarded(ours, wire)
    sender = threading.Thread(target=send_quietly, args=(theirs, b"* garbage\r\n" * 20_000))
    sender.start()
    with pytest.raises(ResponseTooLarge), wire.operation(5.0):
        while True:
            io.readline()
    ours.close()  # the sender stops at once
    sender.join(timeout=5)


def send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(data)


def test_a_passed_deadline_is_a_timeout_in_every_phase() -> None:
    phases: tuple[Phase, ...] = ("connect", "login", "command")
    for phase in phases:
        assert isinstance(classify(DeadlinePassed("x"), phase=phase), MailboxTimeout)


def test_a_refused_literal_is_announced_empty_to_the_parsers() -> None:
    lines = [(b"1 (UID 1 BODY[] {999999999}", b""), b")", (b"2 (UID 2 BODY[] {3}", b"abc")]
    assert mend_refused(lines) == [
        (b"1 (UID 1 BODY[] {0}", b""),
        b")",
        (b"2 (UID 2 BODY[] {3}", b"abc"),
    ]


def test_a_connection_keeps_no_buffered_reader_it_never_reads() -> None:
    """imaplib's ``open`` makes a buffered reader of the socket (8 KiB a connection,
    16 MiB at 2,000 watches); the guarded reads never use it, so only its raw stream
    stays, for ``shutdown`` to close."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as lines:
            conn.sendall(b"* OK ready\r\n")
            tag = lines.readline().split(b" ", 1)[0]  # imaplib asks for CAPABILITY
            conn.sendall(b"* CAPABILITY IMAP4rev1\r\n" + tag + b" OK done\r\n")
            lines.readline()  # until the client goes away

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        wire = Wire(Limits(literal_bytes=1024, response_bytes=4096))
        with wire.operation(10.0):
            imap = _PlainIMAP("127.0.0.1", port, 10.0, wire)
        assert not isinstance(imap.file, io.BufferedIOBase)
        assert "IMAP4REV1" in imap.capabilities
        imap.shutdown()
        assert imap.file.closed
    finally:
        listener.close()
    server.join(5)


def test_equal_capability_lists_are_one_object_and_the_table_stays_bounded() -> None:
    first = shared_capabilities(frozenset({"IMAP4REV1", "IDLE"}))
    assert shared_capabilities(frozenset({"IDLE", "IMAP4REV1"})) is first
    # A hostile server names a new list on every connection: the table starts again.
    for i in range(3 * wire_module.SHARED_CAPABILITY_LISTS):
        lists = (f"X-{i}".encode(), b"IMAP4REV1")
        assert shared_capabilities(lists) == lists
    assert len(wire_module._capability_lists) <= wire_module.SHARED_CAPABILITY_LISTS
