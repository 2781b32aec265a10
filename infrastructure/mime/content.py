"""``StreamingContentReader``: the ``application.mail.content.ContentReader`` port, one
pass over raw MIME read line by line from a stream, never holding a part in memory.

The walk reproduces the compat32 parser's tree for what content needs (which lines are
boundaries, which part a line belongs to, the line end before a boundary belonging to
the boundary) and decodes each leaf's body as it goes: base64 four characters at a time,
quoted-printable line by line. Headers of a part are read up to ``MAX_HEADER_BYTES`` and
interpreted by the stdlib (``BoundedMessage``: content type, charset, RFC 2231 and RFC
2047 filenames, Content-ID); everything past that cap is skipped.

Bounds, since everything in a message is data: lines are read in pieces of at most
``MAX_LINE`` bytes; nesting deeper than ``MAX_DEPTH`` and parts past ``MAX_PARTS`` are
not descended into (their bytes are skipped, a defect is listed); the text and HTML
bodies are kept up to a bound each (``truncated``). Memory stays at one line
plus one chunk whatever the size of an attachment.

The text body is the first text/plain leaf that is neither an attachment nor named; the
HTML body the first such text/html leaf (line ends of both made ``\n``). Every other
leaf (and a message/* part, kept whole) is an attachment. What each leaf says and how
it is made safe (sanitized HTML, filenames, bounded bodies) is ``mime.parts``.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterator
from email.message import Message
from email.parser import BytesHeaderParser
from email.policy import compat32
from typing import BinaryIO

from application.mail.content import MessageContent
from infrastructure.mime.bounded import BoundedMessage
from infrastructure.mime.parts import ContentBuilder, PartHead, head_of, make_attachment_id

MAX_LINE = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_PARTS = 1000
MAX_PREAMBLE_BYTES = 1024 * 1024
CHUNK = 64 * 1024
BLOCK = 256 * 1024

_B64_DELETE = bytes(c for c in range(256) if not re.match(rb"[A-Za-z0-9+/=]", bytes([c])))
_HEADER_LINE = re.compile(rb"From |[\x21-\x39\x3b-\x7e]*:|[ \t]")


class StreamingContentReader:
    def read(self, stream: BinaryIO, *, message_id: str) -> MessageContent:
        builder = ContentBuilder(message_id)
        walker = _Walker(stream, builder.defects)
        for head, body in walker.leaves():
            builder.leaf(head, body)
        return builder.result()

    def chunks(self, stream: BinaryIO, attachment_id: str, *, message_id: str) -> Iterator[bytes]:
        path = attachment_id.split("-", 1)[0]
        if make_attachment_id(message_id, path) != attachment_id:
            return
        walker = _Walker(stream, [])
        for head, body in walker.leaves():
            if head.path == path:
                pending = bytearray()
                for piece in body:
                    pending += piece
                    if len(pending) >= CHUNK:
                        yield bytes(pending)
                        pending.clear()
                if pending:
                    yield bytes(pending)
                return
            for _ in body:  # skip this leaf's bytes
                pass


class _Base64:
    """Base64 as the stdlib's lenient decoder reads it: characters outside the alphabet
    are skipped, ``=`` in the last two places of a quad ends the data once as many of
    them in a row have been seen as the quad lacks (binascii's count), any other ``=``
    is skipped, and missing padding at the end is supplied."""

    def __init__(self, defects: list[str]) -> None:
        self._carry = b""
        self._defects = defects
        self._ended = False
        self._pads = 0  # "=" in a row in the last two places of a quad (binascii's count)

    def feed(self, line: bytes) -> bytes:
        if self._ended:
            return b""
        data = line.translate(None, _B64_DELETE)
        if b"=" in data:
            data = self._until_padding(data)
        elif data:
            self._pads = 0
        data = self._carry + data
        cut = len(data) - len(data) % 4
        self._carry = data[cut:]
        if not cut:
            return b""
        try:
            return binascii.a2b_base64(data[:cut])
        except binascii.Error:
            self._defects.append("InvalidBase64")
            return b""

    def _until_padding(self, data: bytes) -> bytes:
        first = data.index(b"=")
        kept = bytearray(data[:first])
        if first:
            self._pads = 0
        for char in data[first:]:
            if char != 0x3D:
                kept.append(char)
                self._pads = 0
                continue
            position = (len(self._carry) + len(kept)) % 4
            if position < 2:
                continue
            self._pads += 1
            if position + self._pads >= 4:
                kept += b"=" * (4 - position)
                self._ended = True
                break
        return bytes(kept)

    def finish(self) -> bytes:
        carry, self._carry = self._carry, b""
        if not carry:
            return b""
        if len(carry) % 4 == 1:
            self._defects.append("InvalidBase64Length")
            return b""
        self._defects.append("InvalidBase64Padding")
        try:
            return binascii.a2b_base64(carry + b"==")
        except binascii.Error:
            return b""


class _Plain:
    def __init__(self, quoted: bool) -> None:
        self._quoted = quoted

    def feed(self, line: bytes) -> bytes:
        return binascii.a2b_qp(line) if self._quoted else line

    def finish(self) -> bytes:
        return b""


class _Walker:
    """The leaves of a message, in the parser's order, each with its decoded body as an
    iterator (to be consumed before the next leaf is asked for)."""

    def __init__(self, stream: BinaryIO, defects: list[str]) -> None:
        self._stream = stream
        self._defects = defects
        self._pending: list[tuple[bytes, bool]] = []  # read back first, last in first
        self._boundaries: list[bytes] = []
        self._parts = 0
        self._cut = False  # the last line read was cut at MAX_LINE
        self._mid_line = False  # the line just read continues a cut one

    def _line(self) -> bytes:
        if self._pending:
            line, self._mid_line = self._pending.pop()
            return line
        self._mid_line = self._cut
        line = self._stream.readline(MAX_LINE)
        self._cut = len(line) == MAX_LINE and not line.endswith(b"\n")
        return line

    def _block_ready(self) -> bool:
        return not self._pending and not self._cut

    def _body_block(self) -> bytes:
        """Up to ``BLOCK`` bytes of whole lines when none of them can be a boundary line
        (no line starts with ``--``); else b"", the lines made pending to be read one by
        one. Base64 bodies are read this way: line by line they cost a Python step
        each."""
        block = self._stream.read(BLOCK)
        if not block:
            return b""
        if not block.endswith(b"\n"):
            rest = self._stream.readline(MAX_LINE)
            self._cut = len(rest) == MAX_LINE and not rest.endswith(b"\n")
            block += rest
        if not block.startswith(b"--") and b"\n--" not in block:
            if not self._cut:
                return block
            # the last line goes on past MAX_LINE: it is read as pieces of a line
            cut = block.rfind(b"\n") + 1
            self._pending.append((block[cut:], False))
            return block[:cut]
        pieces = [line + b"\n" for line in block.split(b"\n")]
        pieces[-1] = pieces[-1][:-1]
        if not pieces[-1]:
            pieces.pop()
        for index in range(len(pieces) - 1, -1, -1):
            self._pending.append((pieces[index], False))
        return b""

    def _unread(self, line: bytes) -> None:
        if line:
            self._pending.append((line, self._mid_line))

    def _boundary_of(self, line: bytes) -> tuple[int, bool] | None:
        """(index in the stack, is close) when the line is a boundary line of an open
        multipart (the innermost match wins)."""
        if not line.startswith(b"--") or not self._boundaries or self._mid_line:
            return None
        stripped = line.rstrip(b"\r\n").rstrip(b" \t")
        for index in range(len(self._boundaries) - 1, -1, -1):
            sep = self._boundaries[index]
            if stripped == sep:
                return index, False
            if stripped == sep + b"--":
                return index, True
        return None

    def leaves(self) -> Iterator[tuple[PartHead, Iterator[bytes]]]:
        yield from self._entity("", 0)

    def _headers(self) -> Message:
        """The header block, as the feedparser reads it: up to a blank line, a boundary
        line or a line that is no header (which starts the body); a ``From `` line last
        but not first is the body's first line."""
        block = bytearray()
        lines = 0
        last_start = 0
        while True:
            line = self._line()
            if not line:
                break
            if self._boundary_of(line) is not None:
                self._unread(line)
                break
            if line in (b"\n", b"\r\n"):
                break
            if not self._mid_line and not _HEADER_LINE.match(line):
                self._unread(line)  # no header: the body starts here (as the feedparser)
                break
            if not self._mid_line:
                lines += 1
                last_start = len(block)
            if len(block) + len(line) <= MAX_HEADER_BYTES:
                block += line
            elif "HeadersTooLong" not in self._defects:
                self._defects.append("HeadersTooLong")
        if lines > 1 and block.startswith(b"From ", last_start):
            self._pending.append((bytes(block[last_start:]), False))
            del block[last_start:]
        return BytesHeaderParser(BoundedMessage, policy=compat32).parsebytes(bytes(block))

    def _entity(self, path: str, depth: int) -> Iterator[tuple[PartHead, Iterator[bytes]]]:
        msg = self._headers()
        self._parts += 1
        boundary = msg.get_boundary() if msg.get_content_maintype() == "multipart" else None
        if boundary is not None:
            if depth >= MAX_DEPTH or self._parts > MAX_PARTS:
                self._defects.append("TooDeep" if depth >= MAX_DEPTH else "TooManyParts")
                self._skip()
                return
            yield from self._multipart(msg, path, depth, boundary)
            return
        leaf_path = path or "1"
        head = head_of(msg, leaf_path, self._defects)
        cte = str(msg.get("content-transfer-encoding", "")).strip().lower()
        yield head, self._body(cte, strip_last=depth > 0)

    def _multipart(  # noqa: C901
        self, msg: Message, path: str, depth: int, boundary: str
    ) -> Iterator[tuple[PartHead, Iterator[bytes]]]:
        sep = b"--" + boundary.encode("utf-8", "surrogateescape")
        self._boundaries.append(sep)
        mine = len(self._boundaries) - 1
        try:
            # the preamble: up to the first boundary line; without one, the preamble is
            # the part's body (as the feedparser has it), kept up to MAX_PREAMBLE_BYTES
            preamble: list[bytes] = []
            kept = 0
            while True:
                line = self._line()
                found = self._boundary_of(line) if line else None
                if found is not None and found[0] == mine and not found[1]:
                    break
                if found is not None or not line:
                    if found is not None and found[0] == mine:  # a close first: the
                        self._skip_to_outer(mine)  # rest is the epilogue
                    else:
                        self._unread(line)
                    del self._boundaries[mine:]
                    self._defects.append("StartBoundaryNotFound")
                    head = head_of(msg, path or "1", self._defects)
                    cte = str(msg.get("content-transfer-encoding", "")).strip().lower()
                    yield head, self._body(cte, strip_last=depth > 0, lines=iter(preamble))
                    return
                kept += len(line)
                if kept <= MAX_PREAMBLE_BYTES:
                    preamble.append(line)
            index = 0
            while True:
                index += 1
                self._swallow_repeated(mine)
                if self._parts >= MAX_PARTS:
                    self._defects.append("TooManyParts")
                    self._skip_to_outer(mine)
                    return
                child = f"{path}.{index}" if path else str(index)
                yield from self._entity(child, depth + 1)
                line = self._line()
                found = self._boundary_of(line) if line else None
                if found is None:
                    return  # the end of the stream
                if found[0] != mine:
                    self._unread(line)
                    return
                if found[1]:
                    self._skip_to_outer(mine)  # the epilogue
                    return
        finally:
            del self._boundaries[mine:]

    def _swallow_repeated(self, mine: int) -> None:
        """Boundary lines right after a separator make no parts (the feedparser's
        reading of RFC 2046): skip them, a close one too."""
        while True:
            line = self._line()
            found = self._boundary_of(line) if line else None
            if found is None or found[0] != mine:
                self._unread(line)
                return

    def _skip_to_outer(self, mine: int) -> None:
        while True:
            line = self._line()
            if not line:
                return
            found = self._boundary_of(line)
            if found is not None and found[0] < mine:
                self._unread(line)
                return

    def _skip(self) -> None:
        for _ in self._body("", strip_last=False):
            pass

    def _body(  # noqa: C901, PLR0912
        self, cte: str, *, strip_last: bool, lines: Iterator[bytes] | None = None
    ) -> Iterator[bytes]:
        """The decoded body: from ``lines``, else from the stream up to a boundary line."""
        decoder: _Base64 | _Plain = (
            _Base64(self._defects) if cte == "base64" else _Plain(cte == "quoted-printable")
        )
        previous: bytes | None = None
        while True:
            if lines is None and isinstance(decoder, _Base64) and self._block_ready():
                block = self._body_block()
                if block:  # whole lines, none of them a boundary: line ends do not matter
                    if previous is not None:
                        block, previous = previous + block, None
                    out = decoder.feed(block)
                    if out:
                        yield out
                    continue
            line = next(lines, b"") if lines is not None else self._line()
            if not line:
                break
            if lines is None and self._boundary_of(line) is not None:
                self._unread(line)
                break
            if previous is not None:
                out = decoder.feed(previous)
                if out:
                    yield out
            previous = line
        if previous is not None:
            if strip_last:
                previous = previous.removesuffix(b"\n").removesuffix(b"\r")
            out = decoder.feed(previous)
            if out:
                yield out
        tail = decoder.finish()
        if tail:
            yield tail
