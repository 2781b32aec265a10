"""The message an outbound record is made of: RFC 5322 bytes composed from its parts,
once, at queue time (the outbox keeps them sealed; every attempt sends the same bytes).

Pure but for the standard library's ``email`` package. Every header value was checked
for CR and LF at the boundary (``send_message``); the ``email`` policy refuses them again
here (``ValueError``), so no caller's value can add a header. The transmitted copy has no
Bcc header; the copy for the Sent folder keeps it.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from email import policy
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime

from application.mail.outbound.recipients import Mailbox

LINE_BREAKS = frozenset("\r\n")
_POLICY = policy.SMTP.clone(max_line_length=998)


@dataclass(frozen=True)
class Attachment:
    filename: str
    content_type: str
    content_base64: str = ""
    data: bytes | None = None  # an upload's bytes, instead of ``content_base64``

    def content(self) -> bytes:
        if self.data is not None:
            return self.data
        return base64.b64decode(self.content_base64, validate=True)


@dataclass(frozen=True)
class Draft:
    """What the caller asked to send, as it is kept (sealed) in the outbox."""

    sender: str
    to: tuple[Mailbox | str, ...]  # a str: a bare address
    cc: tuple[Mailbox | str, ...] = ()
    bcc: tuple[Mailbox | str, ...] = ()
    subject: str = ""
    text: str | None = None
    html: str | None = None
    attachments: tuple[Attachment, ...] = ()
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    message_id: str = ""
    date: str = ""  # RFC 5322 date, fixed at queue time

    @property
    def recipients(self) -> list[str]:
        return [_bare(m) for m in (*self.to, *self.cc, *self.bcc)]

    def envelope_json(self) -> dict[str, object]:
        """The addresses mail goes to (names are the header's only)."""
        return {
            "from": self.sender,
            "to": [_bare(m) for m in self.to],
            "cc": [_bare(m) for m in self.cc],
            "bcc": [_bare(m) for m in self.bcc],
        }


def _bare(mailbox: Mailbox | str) -> str:
    return mailbox if isinstance(mailbox, str) else mailbox.address


def _header(mailboxes: Sequence[Mailbox | str]) -> list[Address]:
    """Header addresses: the policy quotes a name, or encodes it (RFC 2047) where it is
    not ASCII."""
    return [
        Address(addr_spec=m) if isinstance(m, str) else Address(m.name, addr_spec=m.address)
        for m in mailboxes
    ]


def new_message_id(outbound_id: str, sender: str) -> str:
    """Ours, made once at queue time: the outbound id (so the Sent copy, read back,
    names its record) and a random part, at the sender's domain."""
    domain = sender.rsplit("@", 1)[-1] or "tidings.invalid"
    return f"<tidings.{outbound_id.replace('-', '')}.{secrets.token_hex(6)}@{domain}>"


def outbound_id_of(message_id_header: str) -> str | None:
    """The outbound id a Message-ID of ours names (``new_message_id``), else None."""
    value = message_id_header.strip()
    if not value.startswith("<tidings.") or "@" not in value:
        return None
    local = value[len("<tidings.") :].split("@", 1)[0]
    hex_id = local.split(".", 1)[0]
    if len(hex_id) != 32 or any(ch not in "0123456789abcdef" for ch in hex_id):
        return None
    return f"{hex_id[:8]}-{hex_id[8:12]}-{hex_id[12:16]}-{hex_id[16:20]}-{hex_id[20:]}"


def rfc5322_date(moment: datetime) -> str:
    return format_datetime(moment)


def compose(draft: Draft, *, with_bcc: bool) -> bytes:
    """The message's bytes (CRLF line ends, 7-bit): with the Bcc header for the Sent copy,
    without it for the copy that is transmitted (``without_bcc`` gives that one from the
    kept bytes)."""
    message = EmailMessage(policy=_POLICY)
    message["From"] = draft.sender
    if draft.to:
        message["To"] = _header(draft.to)
    if draft.cc:
        message["Cc"] = _header(draft.cc)
    if with_bcc and draft.bcc:
        message["Bcc"] = _header(draft.bcc)
    message["Subject"] = draft.subject
    message["Date"] = draft.date
    message["Message-ID"] = draft.message_id
    if draft.in_reply_to:
        message["In-Reply-To"] = draft.in_reply_to
    if draft.references:
        message["References"] = " ".join(draft.references)
    message["MIME-Version"] = "1.0"
    _body(message, draft.text, draft.html, draft.attachments)
    return message.as_bytes(policy=_POLICY)


def _body(
    message: EmailMessage, text: str | None, html: str | None, attachments: Sequence[Attachment]
) -> None:
    if text is not None or html is None:
        message.set_content(text or "", cte="quoted-printable")
        if html is not None:
            message.add_alternative(html, subtype="html", cte="quoted-printable")
    else:
        message.set_content(html, subtype="html", cte="quoted-printable")
    for attachment in attachments:
        maintype, _, subtype = attachment.content_type.partition("/")
        message.add_attachment(
            attachment.content(),
            maintype=maintype,
            subtype=subtype or "octet-stream",
            filename=attachment.filename,
        )


def without_bcc(message: bytes) -> bytes:
    """The message without its Bcc header (and the header's folded lines): what is
    transmitted. Only the header block is read; the body is left as it is."""
    end = message.find(b"\r\n\r\n")
    head, body = (message, b"") if end < 0 else (message[: end + 2], message[end + 2 :])
    kept: list[bytes] = []
    dropping = False
    for line in head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            if not dropping:
                kept.append(line)
            continue
        dropping = line[:4].lower() == b"bcc:"
        if not dropping:
            kept.append(line)
    return b"\r\n".join(kept) + body


def valid_base64(value: str) -> bool:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True
