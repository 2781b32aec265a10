"""Every use of imapclient's and imaplib's private internals, in one module.

Written for imapclient 3.x and 4.x (pyproject allows ``>=3,<5``; checked against 4.1.0)
on CPython 3.11-3.13's ``imaplib``. What it relies on: ``IMAPClient._create_IMAP4``,
``._imap``, ``._idle_tag`` and ``._checkok``; ``imapclient.imap4.IMAP4WithTimeout`` and
``imapclient.tls.IMAP4_TLS``; imaplib's ``_create_socket``, ``read``, ``readline`` and
``send`` hooks, and its ``_command``, ``_command_complete``, ``_untagged_response``,
``_new_tag``, ``_get_response``, ``_get_line``, ``tagged_commands``,
``untagged_responses`` and ``debug``. A new imapclient or Python release is checked
here and nowhere else.

The connection reads the socket itself (no ``makefile``), so every byte passes two
guards that a server cannot talk its way around:

- **A total deadline per operation** (``Wire.operation``): before each ``recv`` and
  ``sendall`` the time left is set as the socket's timeout, and past the deadline
  ``DeadlinePassed`` is raised. A server that drips one byte a second is cut off at
  the deadline, not after one read timeout per byte. The whole session may carry an
  outer deadline too (``Wire.session_expires``: a poll's), which caps every operation.
  Outside an operation (an idling watch reading without blocking) the socket's own
  timeout applies.
- **Bounded buffering**: a literal the server announces larger than
  ``Limits.literal_bytes`` is never allocated; its bytes are read and discarded in
  small chunks (still under the deadline) and an empty literal stands in its place,
  counted in ``Wire.refused`` so the session can record the message ``too_large``.
  Everything else one operation buffers (lines and literals) is capped at
  ``Limits.response_bytes``; past it ``ResponseTooLarge`` ends the operation. Lines
  keep imaplib's 1,000,000-byte limit.
"""

from __future__ import annotations

import contextlib
import imaplib
import io
import re
import select
import socket
import ssl
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from imapclient import IMAPClient
from imapclient.imap4 import IMAP4WithTimeout
from imapclient.imapclient import join_message_ids, seq_to_parenstr_upper
from imapclient.tls import IMAP4_TLS
from imapclient.tls import wrap_socket as tls_wrap

_RECV = 64 * 1024
T = TypeVar("T")
_MAXLINE: int = getattr(imaplib, "_MAXLINE", 1_000_000)


class DeadlinePassed(TimeoutError):
    """An operation's total deadline passed while bytes were awaited or sent."""


class ResponseTooLarge(OSError):
    """One operation's response passed the bytes a connection may buffer."""


def too_large(exc: BaseException) -> bool:
    """``exc`` is an answer past the buffer cap or a line past imaplib's line limit (which
    imaplib re-raises as its own ``error`` with the reader's text)."""
    return isinstance(exc, ResponseTooLarge) or (
        isinstance(exc, imaplib.IMAP4.error) and f"got more than {_MAXLINE} bytes" in str(exc)
    )


@dataclass(frozen=True, slots=True)
class Limits:
    literal_bytes: int
    """The largest literal buffered; larger ones are discarded unread (``refused``)."""
    response_bytes: int
    """What one operation may buffer in all (lines and literals)."""


class Wire:
    """The deadline and byte accounting of one connection (one thread at a time)."""

    def __init__(self, limits: Limits, *, session_expires: float | None = None) -> None:
        self.limits = limits
        self.session_expires = session_expires  # monotonic; caps every operation
        self.expires: float | None = None  # the running operation's deadline
        self.buffered = 0  # bytes the running operation has buffered
        self.refused = 0  # literals discarded for their size (read with ``take_refused``)

    @contextlib.contextmanager
    def operation(self, seconds: float) -> Iterator[None]:
        """Run the body under a total deadline of ``seconds`` (nested: the tighter)."""
        until = time.monotonic() + seconds
        if self.session_expires is not None:
            until = min(until, self.session_expires)
        outer, outer_bytes = self.expires, self.buffered
        if outer is not None:
            until = min(until, outer)
        else:
            self.buffered = 0
        self.expires = until
        try:
            yield
        finally:
            self.expires = outer
            self.buffered = outer_bytes if outer is not None else 0

    def remaining(self) -> float | None:
        """Seconds left in the running operation (None outside one); raises past it."""
        if self.expires is None:
            return None
        left = self.expires - time.monotonic()
        if left <= 0:
            raise DeadlinePassed("the IMAP operation's deadline passed")
        return left

    def take_refused(self) -> int:
        refused, self.refused = self.refused, 0
        return refused

    def count(self, size: int) -> None:
        if self.expires is None:
            return
        self.buffered += size
        if self.buffered > self.limits.response_bytes:
            raise ResponseTooLarge("the server's response passed the bytes one operation buffers")


class GuardedIO:
    """imaplib's byte I/O replaced by deadline-aware reads from the socket (see above)."""

    sock: socket.socket
    _wire: Wire
    _inbuf: bytearray

    _connect_to: tuple[str, ...]
    _stream: Any = None

    # imaplib's ``open`` and ``starttls`` set ``file`` to ``sock.makefile("rb")``, a
    # buffered reader this class never reads (``readline`` and ``read`` below read the
    # socket); ``shutdown`` only closes it. Its 8 KiB buffer per connection (16 MiB in a
    # worker holding 2,000 watches) is let go at once: only the raw stream under it is kept.
    @property
    def file(self) -> Any:
        return self._stream

    @file.setter
    def file(self, stream: Any) -> None:
        self._stream = stream.detach() if isinstance(stream, io.BufferedReader) else stream

    def _create_socket(self, timeout: float | None = None) -> socket.socket:
        left = self._wire.remaining()
        if left is not None:
            timeout = left if timeout is None else min(timeout, left)
        if self._connect_to:
            return self._secure(connect_first(self._connect_to, self.port, timeout))  # type: ignore[attr-defined]
        sock: socket.socket = super()._create_socket(timeout)  # type: ignore[misc]
        return sock

    def _secure(self, sock: socket.socket) -> socket.socket:
        """The connected socket as the session uses it (TLS wraps it)."""
        return sock

    def _guarded(self) -> float | None:
        """The timeout to set before blocking I/O, or None to leave the socket as it is
        (outside an operation, or a non-blocking read of an idling watch)."""
        left = self._wire.remaining()
        if left is None or self.sock.gettimeout() == 0.0:
            return None
        return left

    def _recv_into(self, view: memoryview) -> int:
        left = self._guarded()
        if left is None:
            return self.sock.recv_into(view)
        prior = self.sock.gettimeout()
        self.sock.settimeout(left)
        try:
            return self.sock.recv_into(view)
        except TimeoutError:
            self._wire.remaining()  # raises DeadlinePassed when that was the cause
            raise
        finally:
            self.sock.settimeout(prior)

    def _fill(self) -> bool:
        """Read what the socket has (at most 64 KiB) into the line buffer; False at EOF."""
        chunk = bytearray(_RECV)
        got = self._recv_into(memoryview(chunk))
        if not got:
            return False
        self._wire.count(got)
        self._inbuf += chunk[:got]
        return True

    def readline(self) -> bytes:
        while True:
            end = self._inbuf.find(b"\n")
            if end > _MAXLINE or (end < 0 and len(self._inbuf) > _MAXLINE):
                raise imaplib.IMAP4.error(f"got more than {_MAXLINE} bytes")
            if end >= 0:
                line = bytes(self._inbuf[: end + 1])
                del self._inbuf[: end + 1]
                return line
            if not self._fill():
                line = bytes(self._inbuf)  # imaplib raises on a missing CRLF or EOF
                self._inbuf.clear()
                return line

    def read(self, size: int) -> bytes:
        if size > self._wire.limits.literal_bytes:
            self._discard(size)
            self._wire.refused += 1
            return b""
        got = min(size, len(self._inbuf))
        self._wire.count(size - got)  # before allocating
        out = bytearray(size)
        out[:got] = self._inbuf[:got]
        del self._inbuf[:got]
        view = memoryview(out)
        while got < size:
            n = self._recv_into(view[got:])
            if not n:
                break  # EOF: imaplib finds the literal short, as with its own reader
            got += n
        return bytes(view[:got])

    def _discard(self, size: int) -> None:
        """Read ``size`` bytes and keep none of them (still under the deadline)."""
        take = min(size, len(self._inbuf))
        del self._inbuf[:take]
        left = size - take
        scratch = memoryview(bytearray(_RECV))
        while left > 0:
            n = self._recv_into(scratch[: min(left, _RECV)])
            if not n:
                return
            left -= n

    def send(self, data: bytes) -> None:
        left = self._guarded()
        if left is None:
            self.sock.sendall(data)
            return
        prior = self.sock.gettimeout()
        self.sock.settimeout(left)
        try:
            self.sock.sendall(data)
        except TimeoutError:
            self._wire.remaining()
            raise
        finally:
            self.sock.settimeout(prior)


class DeadlineContext:
    """An ``ssl.SSLContext`` stand-in whose ``wrap_socket`` runs the TLS handshake under
    the wire's deadline (imaplib's STARTTLS and imapclient's TLS connect both call it):
    a blocking handshake would wait one socket timeout per record a server drips."""

    def __init__(self, context: ssl.SSLContext, wire: Wire) -> None:
        self._context = context
        self._wire = wire

    def wrap_socket(self, sock: socket.socket, server_hostname: str | None = None) -> ssl.SSLSocket:
        tls = self._context.wrap_socket(
            sock, server_hostname=server_hostname, do_handshake_on_connect=False
        )
        timeout = tls.gettimeout()
        tls.setblocking(False)
        try:
            while True:
                try:
                    tls.do_handshake()
                    return tls
                except ssl.SSLWantReadError:
                    self._wait(tls, timeout, write=False)
                except ssl.SSLWantWriteError:
                    self._wait(tls, timeout, write=True)
        finally:
            tls.settimeout(timeout)

    def _wait(self, tls: ssl.SSLSocket, timeout: float | None, *, write: bool) -> None:
        bounds = [x for x in (self._wire.remaining(), timeout) if x is not None]
        wait = min(bounds) if bounds else None
        ready = select.select([], [tls], [], wait) if write else select.select([tls], [], [], wait)
        if not any(ready):
            self._wire.remaining()  # raises DeadlinePassed when that was the cause
            raise TimeoutError("TLS handshake timed out")


def connect_first(addresses: Sequence[str], port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to the first of ``addresses`` that accepts one (no name lookup)."""
    failure: OSError = OSError("no address to connect to")
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout)
        except OSError as error:
            failure = error
    raise failure


class _PlainIMAP(GuardedIO, IMAP4WithTimeout):  # type: ignore[misc]
    def __init__(
        self,
        host: str,
        port: int,
        timeout: float | None,
        wire: Wire,
        *,
        connect_to: tuple[str, ...] = (),
    ) -> None:
        self._wire, self._inbuf, self._connect_to = wire, bytearray(), connect_to
        super().__init__(host, port, timeout)


class _TlsIMAP(GuardedIO, IMAP4_TLS):  # type: ignore[misc]
    def __init__(
        self,
        host: str,
        port: int,
        context: Any,
        timeout: float | None,
        wire: Wire,
        *,
        connect_to: tuple[str, ...] = (),
    ) -> None:
        self._wire, self._inbuf, self._connect_to = wire, bytearray(), connect_to
        super().__init__(host, port, context, timeout)

    def _secure(self, sock: socket.socket) -> socket.socket:
        # The certificate is checked against the name, whatever address was connected.
        secured: socket.socket = tls_wrap(sock, self.ssl_context, self.host)
        return secured


class WireClient(IMAPClient):  # type: ignore[misc]
    """``IMAPClient`` on a guarded connection (``wire``); the greeting is read under
    the operation the caller opened around the constructor."""

    def __init__(
        self,
        host: str,
        *,
        port: int,
        ssl: bool,
        ssl_context: Any,
        timeout: float,
        wire: Wire,
        connect_to: tuple[str, ...] = (),
    ) -> None:
        self.wire, self.connect_to = wire, connect_to
        super().__init__(host, port=port, ssl=ssl, ssl_context=ssl_context, timeout=timeout)

    def _create_IMAP4(self) -> imaplib.IMAP4:
        timeout = getattr(self._timeout, "connect", None)
        if self.ssl:
            return _TlsIMAP(
                self.host,
                self.port,
                self.ssl_context,
                timeout,
                self.wire,
                connect_to=self.connect_to,
            )
        return _PlainIMAP(self.host, self.port, timeout, self.wire, connect_to=self.connect_to)


# -- the private calls the session and the pipeline make ----------------------


# Capability lists are the server's words, the same for every account of a server: one
# copy of each distinct list for all the connections, not one per connection (a worker
# holds thousands). Past this many distinct lists the table starts again.
SHARED_CAPABILITY_LISTS = 1024
_capability_lists: dict[Any, Any] = {}


def shared_capabilities(capabilities: T) -> T:
    """``capabilities`` (a tuple or frozenset), or an equal one another connection holds."""
    if len(_capability_lists) >= SHARED_CAPABILITY_LISTS:
        _capability_lists.clear()
    shared: T = _capability_lists.setdefault(capabilities, capabilities)
    return shared


def shed_start_up_state(client: IMAPClient) -> None:
    """After login, drop what imaplib and imapclient keep from the connection's start
    and never read again (about 3 KiB a connection): the greeting (Dovecot's lists its
    capabilities), imaplib's log of the last lines it traced at debug level, and their
    own copies of the capability lists, which become the shared ones."""
    imap = client._imap
    imap.welcome = b""
    if hasattr(imap, "_cmd_log"):  # only when Python runs without -O
        imap._cmd_log.clear()
    imap.capabilities = shared_capabilities(tuple(imap.capabilities))
    if client._cached_capabilities:
        client._cached_capabilities = shared_capabilities(tuple(client._cached_capabilities))


def quiet(client: IMAPClient) -> None:
    """Switch off imaplib's debug formatting, which imapclient turns on."""
    client._imap.debug = 0


def imap_of(client: Any) -> Any:
    """The imaplib connection under an ``IMAPClient``."""
    return client._imap


def uid_fetch_lines(client: Any, uids: list[int] | str, items: list[str]) -> list[Any]:
    """``UID FETCH`` as ``IMAPClient.fetch`` sends it; imaplib's untagged FETCH data
    (parsed by ``fetch_response.parse_fetch``)."""
    imap = client._imap
    tag = imap._command("UID", "FETCH", join_message_ids(uids), seq_to_parenstr_upper(items))
    typ, data = imap._command_complete("FETCH", tag)
    client._checkok("fetch", typ, data)
    typ, data = imap._untagged_response(typ, data, "FETCH")
    return list(data)


def list_lines(client: Any, args: Sequence[bytes]) -> tuple[list[Any], list[Any]]:
    """``LIST`` with ``args`` as given; imaplib's untagged LIST and STATUS data (LIST-STATUS
    answers with STATUS responses), read by ``list_response``."""
    imap = client._imap
    untagged = imap.untagged_responses
    untagged.pop("LIST", None)  # earlier commands' leftovers are not this answer
    untagged.pop("STATUS", None)
    tag = imap._command("LIST", *args)
    typ, data = imap._command_complete("LIST", tag)
    client._checkok("list", typ, data)
    return list(untagged.pop("LIST", [])), list(untagged.pop("STATUS", []))


_ANNOUNCED = re.compile(rb"\{[0-9]+\}\Z")


def mend_refused(lines: list[Any]) -> list[Any]:
    """FETCH data with each refused literal (read as empty) announced as ``{0}``, so the
    parsers read it as the empty value it now is."""
    out: list[Any] = []
    for line in lines:
        if type(line) is tuple and len(line) == 2 and line[1] == b"" and type(line[0]) is bytes:
            out.append((_ANNOUNCED.sub(b"{0}", line[0]), b""))
        else:
            out.append(line)
    return out


def uid_fetch_command(uids: str, items: Sequence[str]) -> bytes:
    return f"UID FETCH {uids} {seq_to_parenstr_upper(list(items))}".encode()


def read_available(client: Any) -> list[bytes]:
    """The lines that can be read without blocking (the buffer, then the socket)."""
    imap = client._imap
    sock = imap.sock
    timeout = sock.gettimeout()
    sock.setblocking(False)
    lines: list[bytes] = []
    try:
        while True:
            try:
                lines.append(imap._get_line())
            except OSError:  # nothing more to read now
                break
            except imaplib.IMAP4.abort as error:
                if "EOF" in str(error):  # no bytes came: the caller counts empty reads
                    break
                raise
    finally:
        sock.settimeout(timeout)
    return lines


def socket_fileno(client: Any) -> int:
    return int(client._imap.sock.fileno())


def idle_tag(client: Any) -> bytes | None:
    tag: bytes | None = client._idle_tag
    return tag


def set_idle_tag(client: Any, tag: bytes | None) -> None:
    """Record a running IDLE so that imapclient's ``idle_done`` ends it."""
    client._idle_tag = tag


def new_tag(imap: Any) -> bytes:
    tag: bytes = imap._new_tag()
    return tag


def read_line(client: Any) -> bytes:
    """One response line (without CRLF), blocking within the operation's deadline."""
    line: bytes = client._imap._get_line()
    return line


def get_response(imap: Any) -> Any:
    return imap._get_response()


def tagged_commands(imap: Any) -> dict[bytes, Any]:
    tagged: dict[bytes, Any] = imap.tagged_commands
    return tagged


def untagged_responses(imap: Any) -> dict[str, list[Any]]:
    untagged: dict[str, list[Any]] = imap.untagged_responses
    return untagged


def status_answer(client: Any, folder: str, items: bytes) -> tuple[str, list[Any]]:
    """``STATUS folder items``: the tagged answer's type (``OK`` or ``NO``; BAD raises)
    and text, the untagged STATUS data dropped (nothing else reads it)."""
    imap = client._imap
    tag = imap._command("STATUS", client._normalise_folder(folder), items)
    typ, data = imap._command_complete("STATUS", tag)
    imap.untagged_responses.pop("STATUS", None)
    return str(typ), list(data)
