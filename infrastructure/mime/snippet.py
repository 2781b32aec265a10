"""The snippet of a message: the first characters of its first text/plain part (else its
first text/html part, hidden elements and tags stripped), whitespace collapsed."""

from __future__ import annotations

import html
import re
from email.message import Message

from infrastructure.mime.charsets import CONTROL, decode_text

_PLAIN_SCAN = 8 * 1024
_HTML_SCAN = 64 * 1024
# HTML is stripped by scanning, never by a regex that rescans the rest of the text from
# each "<" (quadratic on a body of unclosed tags or comments).
_HIDDEN_OPEN = re.compile(r"<(script|style|head|title)\b|<!--", re.IGNORECASE)
_HIDDEN_CLOSE = {
    tag: re.compile(rf"</{tag}\s*>", re.IGNORECASE) for tag in ("script", "style", "head", "title")
}


def message_snippet(msg: Message, limit: int, defects: list[str]) -> str:
    part, is_html = _first_text_part(msg)
    if part is None:
        return ""
    try:
        payload = part.get_payload(decode=True)
    except Exception:  # payload decoders are lenient; last resort
        defects.append("UndecodableBody")
        return ""
    if not isinstance(payload, bytes):
        return ""
    scan = _HTML_SCAN if is_html else _PLAIN_SCAN
    charset = part.get_content_charset() or "utf-8"
    text = decode_text(payload[:scan], charset, defects, final=len(payload) <= scan)
    if is_html:
        text = html.unescape(_strip_tags(_drop_hidden(text)))
    return collapse(text, limit)


def _drop_hidden(text: str) -> str:
    """``text`` with each script, style, head and title element and each comment made one
    space (an element or comment without its end stays), in one pass."""
    parts: list[str] = []
    pos = 0
    unclosed: set[str] = set()  # no end from here on: later ones have none either
    while (found := _HIDDEN_OPEN.search(text, pos)) is not None:
        tag = (found.group(1) or "!--").lower()
        end = -1
        if tag not in unclosed:
            if tag == "!--":
                close = text.find("-->", found.end())
                end = close + 3 if close >= 0 else -1
            else:
                match = _HIDDEN_CLOSE[tag].search(text, found.end())
                end = match.end() if match else -1
        if end < 0:
            unclosed.add(tag)
            parts.append(text[pos : found.start() + 1])
            pos = found.start() + 1
            continue
        parts.append(text[pos : found.start()])
        parts.append(" ")
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def _strip_tags(text: str) -> str:
    """Each ``<`` up to the next ``>`` made one space, in one pass."""
    parts: list[str] = []
    pos = 0
    while (start := text.find("<", pos)) >= 0:
        end = text.find(">", start)
        if end < 0:
            break
        parts.append(text[pos:start])
        parts.append(" ")
        pos = end + 1
    parts.append(text[pos:])
    return "".join(parts)


def collapse(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text`` with runs of whitespace and control
    characters made one space. Whitespace collapses the same in any prefix of the text, so
    a prefix that already gives ``limit`` characters is enough (the body can be 8 KB)."""
    window = 4 * limit
    while 0 < window < len(text):
        words = " ".join(CONTROL.sub(" ", text[:window]).split())
        if len(words) >= limit:
            return words[:limit].rstrip()
        window *= 4
    return " ".join(CONTROL.sub(" ", text).split())[:limit].rstrip()


def _first_text_part(msg: Message) -> tuple[Message | None, bool]:
    first_html: Message | None = None
    for part in msg.walk():
        if part.is_multipart():
            continue
        ctype = part.get_content_type()
        if ctype not in ("text/plain", "text/html"):
            continue
        if str(part.get("Content-Disposition", "")).strip().lower().startswith("attachment"):
            continue
        if ctype == "text/plain":
            return part, False
        if first_html is None:
            first_html = part
    return first_html, first_html is not None
