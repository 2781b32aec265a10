"""Build, quickly, the ``Message`` tree that ``BytesParser(policy=compat32)`` builds.

The feedparser reads a message one line at a time in Python and compiles a regex per
multipart: that was most of the cost of reading mail. Here one regex splits a header block
and ``str.find`` locates boundary lines. Only the *structure* is reproduced: the parts are
real compat32 ``Message`` objects, so what a header or a parameter means (content type,
boundary, charset, transfer encoding, payload decoding) is still decided by the stdlib.

``parse`` returns None for any shape whose handling it does not reproduce exactly, and the
caller then runs the full parser: bare CR line ends (the feedparser splits lines there),
header lines it would flag (no colon, a leading continuation, ``From `` lines), a header
block not closed by a blank line, message/* parts (parsed as nested messages) and
multipart/digest (its parts default to message/rfc822), multiparts without a boundary,
with a non-7bit/8bit/binary transfer encoding, without a start boundary, or with two
boundary lines in a row, and nesting deeper than ``_MAX_DEPTH``. The one defect it does
reproduce is a missing close boundary (truncated blobs have it). Preambles and epilogues
are not kept: nothing reads them.
"""

from __future__ import annotations

import re
from email.errors import CloseBoundaryNotFoundDefect
from email.message import Message

from infrastructure.mime.bounded import BoundedMessage

# A header field as the feedparser reads it: a name of printable ASCII but ":", the value
# from after the colon (leading blanks dropped) up to its last continuation line.
# Possessive quantifiers keep a failed match on a hostile block linear.
_FIELD = r"([\x21-\x39\x3b-\x7e]++):[ \t]*+([^\n]*+\n(?:[ \t][^\n]*+\n)*+)"
_FIELDS = re.compile(_FIELD)
_HEADER_BLOCK = re.compile(f"(?:{_FIELD})*+")
# What may follow "--boundary" on a boundary line (the feedparser's ``boundaryre``).
_BOUNDARY_TAIL = re.compile(r"(--)?[ \t]*(?:\r?\n)?")
_BARE_CR = re.compile(r"\r(?!\n)")
_MULTIPART_CTES = ("7bit", "8bit", "binary")
_MAX_DEPTH = 8


def parse(raw: bytes) -> Message | None:
    """The tree ``BytesParser(policy=compat32).parsebytes(raw)`` returns, or None when unsure."""
    text = raw.decode("ascii", "surrogateescape")  # as BytesParser does
    if _BARE_CR.search(text):
        return None
    return _Scanner(text).entity(0, len(text), 0)


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text

    def entity(self, start: int, end: int, depth: int) -> Message | None:
        """The message or part in ``text[start:end]``; ``end`` is the start of the line that
        ends it for the feedparser (an enclosing boundary) or the end of the text."""
        head = self._head(start, end)
        if head is None:
            return None
        block, body = head
        msg = BoundedMessage()
        for name, value in _FIELDS.findall(block):
            msg.set_raw(name, value.rstrip("\r\n"))  # as compat32.header_source_parse
        maintype = msg.get_content_maintype()
        if maintype == "message":
            return None
        if maintype == "multipart":
            return msg if self._multipart(msg, body, end, depth) else None
        payload = self.text[body:end]
        if depth:  # the line end before a boundary belongs to the boundary (RFC 2046)
            payload = payload.removesuffix("\n").removesuffix("\r")
        msg.set_payload(payload)
        return msg

    def _head(self, start: int, end: int) -> tuple[str, int] | None:
        """The header block (each line with its line end) and where the body starts."""
        text = self.text
        for blank in ("\n", "\r\n"):
            if text.startswith(blank, start, end):
                return "", start + len(blank)
        crlf = text.find("\n\r\n", start, end)
        lf = text.find("\n\n", start, crlf + 1 if crlf >= 0 else end)  # an earlier LF blank line
        cut = lf if lf >= 0 else crlf
        if cut < 0:
            return None
        block = text[start : cut + 1]
        if not _HEADER_BLOCK.fullmatch(block):
            return None
        return block, cut + (2 if cut == lf else 3)

    def _multipart(self, msg: Message, body: int, end: int, depth: int) -> bool:
        boundary = msg.get_boundary()
        cte = str(msg.get("content-transfer-encoding", "8bit")).lower()
        if (
            not boundary
            or not boundary.isprintable()  # no line ends, no undecodable bytes
            or depth >= _MAX_DEPTH
            or cte not in _MULTIPART_CTES
            or msg.get_content_type() == "multipart/digest"
        ):
            return False
        lines = self._boundary_lines("--" + boundary, body, end)
        if not lines or lines[0][2]:  # a StartBoundaryNotFoundDefect
            return False
        for i, (_, part_start, close) in enumerate(lines):
            if close:
                return True
            part_end = lines[i + 1][0] if i + 1 < len(lines) else end
            part = self.entity(part_start, part_end, depth + 1)
            if part is None:  # an empty part too: boundary lines in a row, or one at the end
                return False
            msg.attach(part)
        msg.defects.append(CloseBoundaryNotFoundDefect())
        return True

    def _boundary_lines(self, sep: str, start: int, end: int) -> list[tuple[int, int, bool]]:
        """(line start, line end, is close) of the lines in ``text[start:end]`` that the
        feedparser takes for boundary ``sep`` lines."""
        text = self.text
        out = []
        at = text.find(sep, start, end)
        while at >= 0:
            if at == start or text[at - 1] == "\n":
                line_end = text.find("\n", at, end) + 1 or end
                match = _BOUNDARY_TAIL.fullmatch(text, at + len(sep), line_end)
                if match:
                    out.append((at, line_end, match.group(1) is not None))
            at = text.find(sep, at + 1, end)
        return out
