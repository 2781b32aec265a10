"""What the parts of a message say, made safe to hand out: a leaf's head (type, charset,
filename, Content-ID, disposition), the attachment index entry built from it, and the
text and HTML bodies collected by ``ContentBuilder``.

HTML is sanitized by nh3 (ammonia): no scripts, styles, event handlers or forms; ``src``
only as a ``cid:`` reference; links get ``noopener noreferrer``. Filenames are made safe
to save: no path, no control, bidi, zero-width or separator characters, no Windows
device name, at most ``MAX_FILENAME`` characters with the extension kept. The
text and HTML bodies are kept up to ``MAX_TEXT_BYTES`` each (``truncated``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from email.header import decode_header
from email.message import Message

import nh3

from application.mail.content import Attachment, MessageContent
from infrastructure.mime.charsets import decode_text

MAX_TEXT_BYTES = 2 * 1024 * 1024
MAX_FILENAME = 200

_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f<>:\"/\\|?*]")
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp"})  # controls (C1 too), bidi, zero width
_DEVICE_NAMES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{port}{n}" for port in ("COM", "LPT") for n in (*"123456789", "¹", "²", "³")}
)
MAX_EXTENSION = 16
_BODY_TYPES = ("text/plain", "text/html")
_REMOTE_ATTRIBUTES = frozenset({"src", "srcset", "background", "poster", "lowsrc", "dynsrc"})


def make_attachment_id(message_id: str, path: str) -> str:
    """The id of the part at ``path`` of that message: meaningless for any other message."""
    digest = hashlib.sha256(f"{message_id}\x00{path}".encode()).hexdigest()[:16]
    return f"{path}-{digest}"


def sanitize_html(html: str) -> str:
    """HTML safe to display: no active content, nothing fetched from elsewhere."""
    return nh3.clean(
        html,
        url_schemes={"http", "https", "mailto", "cid"},
        attribute_filter=_attribute_filter,
        link_rel="noopener noreferrer",
    )


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    if attribute in _REMOTE_ATTRIBUTES and not value.strip().lower().startswith("cid:"):
        return None
    return value


def safe_filename(name: str | None, fallback: str) -> str:
    """A name to save under: the last path component; no control, format (U+202E, zero
    width), line or paragraph separator characters; not a Windows device name; bounded,
    keeping its extension."""
    if not name:
        return fallback
    name = unicodedata.normalize("NFC", name).replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if unicodedata.category(ch) not in _INVISIBLE)
    name = _UNSAFE_NAME.sub("_", name).strip(" .")
    if not name:
        return fallback
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem:
        stem, extension = name, ""
    if stem.split(".", 1)[0].rstrip(" ").upper() in _DEVICE_NAMES:
        stem = "_" + stem
    if len(extension) > MAX_EXTENSION:
        stem, extension = name, ""
    if extension:
        return stem[: MAX_FILENAME - len(extension) - 1] + "." + extension
    return stem[:MAX_FILENAME]


@dataclass(frozen=True, slots=True)
class PartHead:
    """What one leaf's headers say (its decoded size comes from its body)."""

    path: str
    content_type: str
    charset: str | None
    filename: str | None
    content_id: str | None
    disposition: str  # "attachment", "inline" or ""
    is_message: bool

    @property
    def body_kind(self) -> str | None:
        """ "text/plain" or "text/html" when this leaf may be the message's body."""
        body_like = self.content_type in _BODY_TYPES and self.disposition != "attachment"
        return self.content_type if body_like and self.filename is None else None


def head_of(msg: Message, path: str, defects: list[str]) -> PartHead:
    """A part's head from its (compat32) headers."""
    ctype = msg.get_content_type()
    disposition = str(msg.get("content-disposition", "")).split(";", 1)[0].strip().lower()
    try:
        filename = msg.get_filename()
    except Exception:  # a malformed RFC 2231 parameter
        defects.append("UnreadableFilename")
        filename = None
    if isinstance(filename, str) and "=?" in filename:
        filename = _rfc2047(filename, defects)
    cid = msg.get("content-id")
    content_id = None
    if isinstance(cid, str) and cid.strip():
        content_id = _CONTROL.sub("", cid.strip().removeprefix("<").removesuffix(">"))[:998]
    charset = None
    try:
        charset = msg.get_content_charset()
    except Exception:
        defects.append("UnreadableCharset")
    return PartHead(
        path=path,
        content_type=ctype[:255],
        charset=charset,
        filename=filename,
        content_id=content_id,
        disposition=disposition if disposition in ("attachment", "inline") else "",
        is_message=msg.get_content_maintype() == "message",
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _rfc2047(value: str, defects: list[str]) -> str:
    try:
        parts = decode_header(value)
    except Exception:
        defects.append("InvalidEncodedWord")
        return value
    out = []
    for chunk, charset in parts:
        if isinstance(chunk, str):
            out.append(chunk)
        else:
            out.append(decode_text(chunk, charset or "utf-8", defects))
    return "".join(out)


def to_attachment(head: PartHead, size: int, message_id: str) -> Attachment:
    subtype = head.content_type.partition("/")[2] or "bin"
    fallback = "message.eml" if head.is_message else f"attachment.{subtype[:16]}"
    return Attachment(
        attachment_id=make_attachment_id(message_id, head.path),
        filename=safe_filename(head.filename, safe_filename(fallback, "attachment")),
        content_type=head.content_type,
        size=size,
        content_id=head.content_id,
        inline=head.disposition == "inline"
        or (head.disposition == "" and head.content_id is not None),
    )


class ContentBuilder:
    """Collects the text, HTML and attachment index from leaves and their bodies."""

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        self.defects: list[str] = []
        self._bodies: dict[str, tuple[PartHead, bytearray]] = {}
        self._attachments: list[Attachment] = []
        self.truncated = False

    def wants_body(self, head: PartHead) -> bool:
        kind = head.body_kind
        return kind is not None and kind not in self._bodies

    def leaf(self, head: PartHead, body: Iterator[bytes]) -> None:
        if self.wants_body(head):
            kind = head.body_kind
            assert kind is not None
            buffer = bytearray()
            self._bodies[kind] = (head, buffer)
            for chunk in body:
                room = MAX_TEXT_BYTES - len(buffer)
                if len(chunk) > room:
                    self.truncated = True
                buffer += chunk[: max(room, 0)]
            return
        self._attachments.append(to_attachment(head, sum(len(c) for c in body), self.message_id))

    def result(self) -> MessageContent:
        text = html = None
        if "text/plain" in self._bodies:
            text = self._text("text/plain")
        if "text/html" in self._bodies:
            html = sanitize_html(self._text("text/html"))
        return MessageContent(
            text=text,
            html=html,
            attachments=tuple(self._attachments),
            truncated=self.truncated,
            defects=tuple(dict.fromkeys(self.defects)),
        )

    def _text(self, kind: str) -> str:
        head, data = self._bodies[kind]
        text = decode_text(
            bytes(data), head.charset or "utf-8", self.defects, final=not self.truncated
        )
        return text.replace("\r\n", "\n")
