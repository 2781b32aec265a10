"""Raw test messages (CRLF, so RFC822.SIZE equals the byte length)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from email.utils import format_datetime


def make_message(
    n: int = 0,
    *,
    subject: str | None = None,
    body: str | None = None,
    sender: str = "Sender <sender@example.org>",
    to: str = "Mailbox <box@example.com>",
    date: datetime | None = None,
    message_id: str | None = None,
    pad_to: int = 0,
) -> bytes:
    """A small text/plain message; ``pad_to`` grows the body to about that many bytes."""
    when = date or datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
    mid = message_id or f"<{n}.{uuid.uuid4().hex}@test.example>"
    head = (
        f"Message-ID: {mid}\r\n"
        f"Date: {format_datetime(when)}\r\n"
        f"From: {sender}\r\n"
        f"To: {to}\r\n"
        f"Subject: {subject if subject is not None else f'Message {n}'}\r\n"
        "MIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "\r\n"
    ).encode()
    text = (body if body is not None else f"Body of message {n}.") + "\r\n"
    raw = head + text.encode()
    if pad_to > len(raw):
        line = b"x" * 76 + b"\r\n"
        raw += line * ((pad_to - len(raw)) // len(line))
    return raw
