"""A hostile IMAP server on loopback: scripted answers that break the rules a client trusts.

``HostileImapServer(script)`` listens on 127.0.0.1 (a free port) and speaks just enough
IMAP for our client — greeting, CAPABILITY, LOGIN, EXAMINE/SELECT, UID SEARCH,
UID FETCH, LIST, STATUS, NOOP, IDLE, LOGOUT — answering from the ``Script``: its messages
(per folder where ``folder_messages`` says)
(``HostileMessage``: any RFC822.SIZE or INTERNALDATE text, announced literals larger
than what follows, garbage FETCH lines), its LIST answer (any lines, literals included)
and its connection-wide tricks (a one-byte-a-second drip, any UIDVALIDITY, UIDs out of
range in SEARCH answers, garbage lines).

Every loop is bounded in count and in time: the server accepts at most
``max_connections``, each answers at most ``max_commands``, nothing waits on a socket
for more than ``idle_timeout``, and the whole server stops by itself after
``lifetime`` seconds (or on ``close``, or leaving its ``with`` block).
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Self

from tests.support.messages import make_message

BIG = 999_999_999  # a literal size a server may announce: about 1 GB
_CHUNK = 1024 * 1024
_SEQUENCE = re.compile(rb"(\d+|\*)(?::(\d+|\*))?")
_PARTIAL = re.compile(rb"BODY\.PEEK\[\]<(\d+)\.(\d+)>", re.I)


@dataclass
class HostileMessage:
    uid: int
    body: bytes = b""
    size: str | None = None
    """RFC822.SIZE exactly as sent (default: the body's length)."""
    internaldate: str = '"01-Jan-2026 10:00:00 +0000"'
    """INTERNALDATE exactly as sent (quotes included)."""
    body_literal: int | None = None
    """The size announced for ``BODY[]`` (default: the body's length)."""
    header_literal: int | None = None
    """The size announced for the header fields (default: their length)."""
    literal_sent: int | None = None
    """How many bytes follow an announced literal (default: all it announced); fewer
    leave the client waiting for the rest."""
    garbage: bytes | None = None
    """Sent instead of this message's metadata FETCH response (a whole line)."""
    flags: bytes = b""
    """FLAGS exactly as sent, between the parentheses (thousands of keywords, say)."""
    modseq: int = 1
    """MODSEQ as sent with its flags (a CONDSTORE server's)."""

    def __post_init__(self) -> None:
        if not self.body:
            self.body = make_message(self.uid)


@dataclass
class Script:
    messages: list[HostileMessage] = field(default_factory=list)
    uidvalidity: str = "7"
    uidnext: str | None = None
    """UIDNEXT as sent (default: one past the largest UID)."""
    extra_search_uids: tuple[int, ...] = ()
    """UIDs the SEARCH answers add (e.g. beyond 2^32 - 1)."""
    vanish_all: bool = False
    """``UID SEARCH ALL`` answers no UID at all (EXAMINE still counts every message)."""
    drip_from: str | None = None
    """From this point on every byte is sent alone, ``drip_seconds`` apart: "greeting",
    "login" (answers to LOGIN and after) or "fetch" (answers to UID FETCH)."""
    drip_seconds: float = 1.0
    garbage_lines: tuple[bytes, ...] = ()
    """Lines sent before the tagged answer of every UID FETCH."""
    capabilities: str = "IMAP4rev1 IDLE"
    list_lines: list[bytes] = field(default_factory=list)
    """What LIST answers, each sent as ``* LIST <line>``; a line may hold literals."""
    status_lines: list[bytes] = field(default_factory=list)
    """Sent with LIST's answer as ``* STATUS <line>`` (LIST-STATUS)."""
    refuse_list_return: bool = False
    """Answer BAD to a LIST with ``RETURN`` (whatever the capabilities said)."""
    highestmodseq: int | None = None
    """HIGHESTMODSEQ sent with EXAMINE (put CONDSTORE in ``capabilities`` too). A flag
    FETCH is answered with every message it names, ``CHANGEDSINCE`` or not."""
    vanished_lines: list[bytes] = field(default_factory=list)
    """Sent after an EXAMINE with ``(QRESYNC ...)`` as ``* VANISHED <line>`` (put
    QRESYNC and ENABLE in ``capabilities`` too)."""
    qresync_flags: bool = True
    """An EXAMINE with ``(QRESYNC ...)`` also answers every message's flags."""
    folder_messages: dict[bytes, list[HostileMessage]] = field(default_factory=dict)
    """Folders (by name as sent) whose EXAMINE selects these messages instead of
    ``messages``, for the rest of that session."""
    status_answer: bytes = b"NO [NONEXISTENT] no such folder"
    """The tagged answer to ``STATUS`` of a folder other than INBOX (``OK ...``: it is
    there, whatever LIST said)."""


def bad_charset_message(uid: int) -> HostileMessage:
    """A message whose charset is a codec that is not a text encoding."""
    body = (
        b"Message-ID: <charset.%d@hostile.example>\r\n"
        b"Date: Thu, 1 Jan 2026 10:00:00 +0000\r\n"
        b"From: Sender <sender@example.org>\r\n"
        b"Subject: =?unicode-escape?Q?\\ud800?=\r\n"
        b"MIME-Version: 1.0\r\n"
        b"Content-Type: text/plain; charset=unicode-escape\r\n"
        b"\r\n"
        b"\\ud800 lone surrogate\r\n" % uid
    )
    return HostileMessage(uid, body=body)


class HostileImapServer:
    def __init__(
        self,
        script: Script,
        *,
        lifetime: float = 120.0,
        max_connections: int = 20,
        max_commands: int = 500,
        idle_timeout: float = 30.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.script = script
        self._tls = tls  # a server context: every connection speaks TLS from the start
        self.host = "127.0.0.1"
        self._listener = socket.create_server((self.host, 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._until = time.monotonic() + lifetime
        self._max_connections = max_connections
        self._max_commands = max_commands
        self._idle_timeout = idle_timeout
        self._stop = threading.Event()
        self.connections = 0
        self.commands: list[bytes] = []  # every command line received (for assertions)
        self._thread = threading.Thread(target=self._serve, name="hostile-imap", daemon=True)
        self._thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()

    def _live(self) -> bool:
        return not self._stop.is_set() and time.monotonic() < self._until

    def _serve(self) -> None:
        while self._live() and self.connections < self._max_connections:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    # -- one connection --------------------------------------------------------

    def _session(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(min(self._idle_timeout, 1.0))
            with contextlib.suppress(OSError):  # the client hung up: nothing to answer
                if self._tls is not None:
                    conn = self._tls.wrap_socket(conn, server_side=True)
                _Conversation(self, conn).run()


class _Conversation:
    def __init__(self, server: HostileImapServer, conn: socket.socket) -> None:
        self.server = server
        self.script = server.script
        self.conn = conn
        self.buffer = b""
        self.dripping = self.script.drip_from == "greeting"

    def send(self, data: bytes) -> None:
        if not self.dripping:
            self.conn.sendall(data)
            return
        for i in range(len(data)):  # one byte at a time, while the server lives
            if not self.server._live():
                return
            self.conn.sendall(data[i : i + 1])
            self.server._stop.wait(self.script.drip_seconds)

    def send_literal(self, announced: int, content: bytes, sent: int | None) -> None:
        """``content`` padded (or cut) to ``sent`` bytes of an announced literal."""
        total = announced if sent is None else min(sent, announced)
        head, left = content[:total], total - min(len(content), total)
        self.send(head)
        filler = b"x" * _CHUNK
        for _ in range(left // _CHUNK + 1):  # bounded: the count of chunks
            if left <= 0 or not self.server._live():
                break
            piece = filler[: min(left, _CHUNK)]
            self.send(piece)
            left -= len(piece)
        if total < announced:  # leave the client waiting, until it gives up
            while self.server._live():
                self.server._stop.wait(0.2)
                if self._hung_up():
                    return

    def _hung_up(self) -> bool:
        try:
            self.conn.settimeout(0.0)
            return self.conn.recv(_CHUNK) == b""
        except BlockingIOError:
            return False
        finally:
            self.conn.settimeout(1.0)

    def readline(self) -> bytes | None:
        waited = 0.0
        while b"\n" not in self.buffer:
            if not self.server._live() or waited >= self.server._idle_timeout:
                return None
            try:
                chunk = self.conn.recv(65536)
            except TimeoutError:
                waited += 1.0
                continue
            if not chunk:
                return None
            self.buffer += chunk
            if len(self.buffer) > 1_000_000:
                return None
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.rstrip(b"\r")

    def run(self) -> None:
        caps = self.script.capabilities.encode()
        self.send(b"* OK [CAPABILITY " + caps + b"] hostile ready\r\n")
        for _ in range(self.server._max_commands):
            line = self.readline()
            if line is None:
                return
            self.server.commands.append(line)
            tag, _, rest = line.partition(b" ")
            name, _, args = rest.partition(b" ")
            verb = name.upper()
            if verb == b"UID":
                sub, _, args = args.partition(b" ")
                verb = b"UID " + sub.upper()
            if not self.answer(tag, verb, args):
                return

    def answer(self, tag: bytes, verb: bytes, args: bytes) -> bool:  # noqa: C901
        script = self.script
        if verb == b"CAPABILITY":
            self.send(b"* CAPABILITY " + script.capabilities.encode() + b"\r\n")
        elif verb == b"LOGIN":
            self.dripping = self.dripping or script.drip_from == "login"
        elif verb in (b"EXAMINE", b"SELECT"):
            name = args.split(b" (", 1)[0].strip().strip(b'"')
            chosen = self.server.script.folder_messages.get(name)
            base = self.server.script
            self.script = script = base if chosen is None else replace(base, messages=chosen)
            uids = [m.uid for m in script.messages]
            uidnext = script.uidnext or str(max(uids, default=0) + 1)
            self.send(
                b"* %d EXISTS\r\n* OK [UIDVALIDITY %s] ok\r\n* OK [UIDNEXT %s] ok\r\n"
                % (len(uids), script.uidvalidity.encode(), uidnext.encode())
            )
            if script.highestmodseq is not None:
                self.send(b"* OK [HIGHESTMODSEQ %d] ok\r\n" % script.highestmodseq)
            if b"(QRESYNC (" in args.upper():
                for line in script.vanished_lines:
                    self.send(b"* VANISHED " + line + b"\r\n")
                if script.qresync_flags:
                    self.flags(b"1:*", by_uid=True)
        elif verb == b"UID SEARCH":
            named = _uid_set(args, script)
            if args.strip().upper() == b"ALL":
                named = {m.uid for m in script.messages}
            found = [m.uid for m in script.messages if m.uid in named]
            found += list(script.extra_search_uids)
            if script.vanish_all and args.strip().upper() == b"ALL":
                found = []
            self.send(b"* SEARCH" + b"".join(b" %d" % u for u in found) + b"\r\n")
        elif verb in (b"UID FETCH", b"FETCH") and b"(UID FLAGS" in args.upper():
            self.flags(args, by_uid=verb == b"UID FETCH")
        elif verb == b"UID FETCH":
            self.dripping = self.dripping or script.drip_from == "fetch"
            self.fetch(args)
            for garbage in script.garbage_lines:
                self.send(garbage + b"\r\n")
        elif verb == b"LIST":
            if script.refuse_list_return and b" RETURN " in args.upper():
                self.send(tag + b" BAD no RETURN here\r\n")
                return True
            for line in script.list_lines:
                self.send(b"* LIST " + line + b"\r\n")
            for line in script.status_lines:
                self.send(b"* STATUS " + line + b"\r\n")
        elif verb == b"STATUS":
            name = args.split(b" (", 1)[0].strip().strip(b'"')
            if name.upper() != b"INBOX" and not script.status_answer.startswith(b"OK"):
                self.send(tag + b" " + script.status_answer + b"\r\n")
                return True
            self.send(b"* STATUS %s (UIDVALIDITY %s)\r\n" % (name, script.uidvalidity.encode()))
        elif verb == b"IDLE":
            self.send(b"+ idling\r\n")
            if self.readline() is None:
                return False
        elif verb == b"LOGOUT":
            self.send(b"* BYE bye\r\n" + tag + b" OK done\r\n")
            return False
        elif verb == b"ENABLE":
            offered = set(script.capabilities.upper().split())
            enabled = [c for c in args.upper().split() if c.decode() in offered]
            if enabled:
                self.send(b"* ENABLED " + b" ".join(enabled) + b"\r\n")
        elif verb != b"NOOP":
            self.send(tag + b" BAD unknown command\r\n")
            return True
        self.send(tag + b" OK done\r\n")
        return True

    def fetch(self, args: bytes) -> None:
        wanted_set, _, items = args.partition(b" ")
        wanted = _uid_set(wanted_set, self.script)
        upper = items.upper()
        for seq, msg in enumerate(self.script.messages, 1):
            if msg.uid not in wanted:
                continue
            if b"RFC822.SIZE" in upper:
                self.metadata(seq, msg)
            partial = _PARTIAL.search(items)
            if partial:
                offset, length = int(partial[1]), int(partial[2])
                piece = msg.body[offset : offset + length]
                self.send(
                    b"* %d FETCH (UID %d BODY[]<%d> {%d}\r\n" % (seq, msg.uid, offset, len(piece))
                )
                self.send(piece + b")\r\n")
            elif b"BODY.PEEK[]" in upper:
                announced = msg.body_literal if msg.body_literal is not None else len(msg.body)
                self.send(b"* %d FETCH (UID %d BODY[] {%d}\r\n" % (seq, msg.uid, announced))
                self.send_literal(announced, msg.body, msg.literal_sent)
                self.send(b")\r\n")

    def flags(self, args: bytes, *, by_uid: bool) -> None:
        """A flag FETCH: every message the set names (by UID or by position), each with
        its FLAGS and MODSEQ, whatever CHANGEDSINCE asked."""
        wanted_set = args.partition(b" ")[0]
        if by_uid:
            wanted = _uid_set(wanted_set, self.script)
        else:
            positions = _positions(wanted_set, len(self.script.messages))
            wanted = {self.script.messages[p - 1].uid for p in positions}
        for seq, msg in enumerate(self.script.messages, 1):
            if msg.uid in wanted:
                self.send(
                    b"* %d FETCH (UID %d FLAGS (%s) MODSEQ (%d))\r\n"
                    % (seq, msg.uid, msg.flags, msg.modseq)
                )

    def metadata(self, seq: int, msg: HostileMessage) -> None:
        if msg.garbage is not None:
            self.send(msg.garbage + b"\r\n")
            return
        head = msg.body.split(b"\r\n\r\n", 1)[0]
        fields = b"".join(
            line + b"\r\n"
            for line in head.split(b"\r\n")
            if line.lower().startswith((b"message-id:", b"date:"))
        )
        fields += b"\r\n"
        size = msg.size if msg.size is not None else str(len(msg.body))
        announced = msg.header_literal if msg.header_literal is not None else len(fields)
        self.send(
            b"* %d FETCH (UID %d RFC822.SIZE %s INTERNALDATE %s FLAGS (%s) "
            b"BODY[HEADER.FIELDS (MESSAGE-ID DATE)] {%d}\r\n"
            % (seq, msg.uid, size.encode(), msg.internaldate.encode(), msg.flags, announced)
        )
        self.send_literal(announced, fields, msg.literal_sent if msg.header_literal else None)
        self.send(b")\r\n")


def _uid_set(text: bytes, script: Script) -> set[int]:
    """The UIDs of the script's messages a sequence set names (``1:5,7``, ``3:*``)."""
    top = max((m.uid for m in script.messages), default=0)
    found: set[int] = set()
    for part in text.split(b" ")[:2]:
        for m in _SEQUENCE.finditer(part):
            lo = top if m[1] == b"*" else int(m[1])
            hi = lo if m[2] is None else (top if m[2] == b"*" else int(m[2]))
            lo, hi = min(lo, hi), max(lo, hi)
            found.update(msg.uid for msg in script.messages if lo <= msg.uid <= hi)
    return found


def _positions(text: bytes, count: int) -> set[int]:
    """The sequence numbers (1..count) a sequence set names."""
    found: set[int] = set()
    for m in _SEQUENCE.finditer(text):
        lo = count if m[1] == b"*" else int(m[1])
        hi = lo if m[2] is None else (count if m[2] == b"*" else int(m[2]))
        found.update(range(max(1, min(lo, hi)), min(count, max(lo, hi)) + 1))
    return found
