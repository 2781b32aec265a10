"""``run_pipelined`` on a real imaplib connection to a scripted peer on 127.0.0.1: the
orderings a real server shows only by chance (mail announced mid-exchange, refusals)."""

from __future__ import annotations

import imaplib
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from imapclient.exceptions import IMAPClientError

from infrastructure.imap.pipeline import run_pipelined

# The running IDLE's tag, then the lines the client sent in one write -> what to answer.
Script = Callable[[list[bytes]], bytes]


class Peer:
    """Greets, answers CAPABILITY, starts an IDLE (tag A), then hands the next write
    (all its lines) to ``script`` and sends back what it returns."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.received: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            conn.sendall(b"* OK ready\r\n")
            tag = self._line(conn).split()[0]  # CAPABILITY
            conn.sendall(b"* CAPABILITY IMAP4rev1 IDLE\r\n" + tag + b" OK done\r\n")
            self.idle_tag = self._line(conn).split()[0]  # IDLE
            conn.sendall(b"+ idling\r\n")
            self.received = self._lines(conn)  # the pipelined write
            conn.sendall(self.script([self.idle_tag, *self.received]))
            while conn.recv(65536):  # until the client goes
                pass

    @staticmethod
    def _line(conn: socket.socket) -> bytes:
        data = b""
        while not data.endswith(b"\r\n"):
            data += conn.recv(1)
        return data

    @staticmethod
    def _lines(conn: socket.socket) -> list[bytes]:
        """The lines of one write: what arrives until 0.3 s of silence."""
        data = conn.recv(65536)
        conn.settimeout(0.3)
        try:
            while chunk := conn.recv(65536):
                data += chunk
        except TimeoutError:
            pass
        conn.settimeout(None)
        return data.splitlines()

    def client(self) -> imaplib.IMAP4:
        imap = imaplib.IMAP4("127.0.0.1", self.port)
        self.tag = imap._command("IDLE")  # as imapclient's ``idle``
        assert imap._get_response() is None  # the continuation
        return imap


MakePeer = Callable[[Script], Peer]


def tags(lines: list[bytes]) -> list[bytes]:
    """The old IDLE's tag, then the tags of what came after DONE."""
    return [lines[0], *(line.split()[0] for line in lines[2:])]


@pytest.fixture
def peer() -> Iterator[MakePeer]:
    peers: list[Peer] = []

    def make(script: Script) -> Peer:
        peers.append(Peer(script))
        return peers[-1]

    yield make
    for p in peers:
        p._listener.close()


def answer(idle: bytes, first: bytes, second: bytes, new_idle: bytes, *, news: bytes) -> bytes:
    return (
        idle
        + b" OK Idle completed.\r\n"
        + b"* 1 FETCH (UID 5 RFC822.SIZE 3)\r\n"
        + first
        + b" OK Fetch completed.\r\n"
        + news
        + b"* 1 FETCH (UID 5 BODY[]<0> {3}\r\nabc)\r\n"
        + second
        + b" OK Fetch completed.\r\n"
        + b"+ idling\r\n"
    )


COMMANDS = [("fetch", b"UID FETCH 5:* (RFC822.SIZE)"), ("fetch", b"UID FETCH 5:12 (BODY[])")]


def test_done_the_commands_and_idle_go_in_one_write_and_answers_come_back(peer: MakePeer) -> None:
    p = peer(lambda lines: answer(*tags(lines), news=b""))
    imap = p.client()
    done = run_pipelined(imap, COMMANDS, p.tag, True)
    assert p.received[0] == b"DONE"
    assert [line.split(b" ", 1)[1] for line in p.received[1:]] == [
        b"UID FETCH 5:* (RFC822.SIZE)",
        b"UID FETCH 5:12 (BODY[])",
        b"IDLE",
    ]
    assert done.fetched == [b"1 (UID 5 RFC822.SIZE 3)", (b"1 (UID 5 BODY[]<0> {3}", b"abc"), b")"]
    assert done.idle_tag == p.received[-1].split()[0] and not done.news_after_done
    assert imap.tagged_commands == {done.idle_tag: None}  # only the new IDLE runs


def test_mail_announced_after_idle_ended_is_news(peer: MakePeer) -> None:
    p = peer(lambda lines: answer(*tags(lines), news=b"* 2 EXISTS\r\n* 1 RECENT\r\n"))
    imap = p.client()
    assert run_pipelined(imap, COMMANDS, p.tag, True).news_after_done


def test_mail_announced_before_idle_ended_is_what_the_commands_fetch(peer: MakePeer) -> None:
    p = peer(lambda lines: b"* 2 EXISTS\r\n" + answer(*tags(lines), news=b""))
    imap = p.client()
    assert not run_pipelined(imap, COMMANDS, p.tag, True).news_after_done


def test_a_refused_command_raises(peer: MakePeer) -> None:
    def refuse(lines: list[bytes]) -> bytes:
        idle, first, second, _ = tags(lines)
        return (
            idle + b" OK Idle completed.\r\n" + first + b" NO [SERVERBUG] oops\r\n"
            b"" + second + b" OK Fetch completed.\r\n+ idling\r\n"
        )

    p = peer(refuse)
    imap = p.client()
    with pytest.raises(IMAPClientError, match="SERVERBUG"):
        run_pipelined(imap, COMMANDS, p.tag, True)


def test_a_refused_idle_raises(peer: MakePeer) -> None:
    def refuse(lines: list[bytes]) -> bytes:
        idle, first, second, new_idle = tags(lines)
        return (
            idle + b" OK Idle completed.\r\n" + first + b" OK Fetch completed.\r\n"
            b"" + second + b" OK Fetch completed.\r\n" + new_idle + b" BAD no idling today\r\n"
        )

    p = peer(refuse)
    imap = p.client()
    with pytest.raises(IMAPClientError, match="IDLE failed: BAD"):
        run_pipelined(imap, COMMANDS, p.tag, True)
