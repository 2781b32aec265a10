"""Tunables of the IMAP adapter (plain values; the composition root fills them)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ImapSettings:
    connect_timeout: float = 30.0
    """Seconds for TCP connect (and TLS handshake)."""
    read_timeout: float = 120.0
    """Seconds any single socket read or write may block."""
    stream_threshold_bytes: int = 4 * MiB
    """Bodies larger than this go to the blob store in chunks instead of inline."""
    chunk_bytes: int = 1 * MiB
    """Size of one ``BODY.PEEK[]<offset.length>`` request when streaming."""
    max_message_bytes: int = 100 * MiB
    """Messages larger than this are returned metadata-only (``too_large``)."""
    max_batch_bytes: int = 32 * MiB
    """A page stops early once its inline bodies add up to more than this."""
    fetch_group_bytes: int = 8 * MiB
    """Inline bodies are fetched in UID FETCH commands of about this many bytes."""
    metadata_group: int = 500
    """UIDs per metadata FETCH command."""
    search_span: int = 50_000
    """Incremental UID SEARCH covers at most this many UIDs per command, so a
    response line stays under imaplib's 1 MB line limit."""
    quiet_imaplib: bool = True
    """Switch off imaplib's debug formatting, which imapclient turns on (it
    repr()s every response line and literal even when nothing is logged)."""
    ssl_context: ssl.SSLContext | None = None
    """For ``tls``/``starttls``; ``None`` = the system's verifying default."""

    def __post_init__(self) -> None:
        if self.chunk_bytes < 1 or self.stream_threshold_bytes < 0:
            raise ValueError("chunk_bytes must be positive, stream_threshold_bytes non-negative")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError("socket timeouts must be positive: a socket never blocks forever")
