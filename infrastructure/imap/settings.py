"""Tunables of the IMAP adapter (plain values; the composition root fills them)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

MiB = 1024 * 1024
_LITERAL_FLOOR = 64 * 1024  # header blocks and partial bodies always fit


@dataclass(frozen=True, slots=True)
class ImapAdapterSettings:
    connect_timeout: float = 30.0
    """Seconds for TCP connect (and TLS handshake)."""
    read_timeout: float = 120.0
    """Seconds any single socket read or write may block."""
    operation_timeout: float = 120.0
    """Seconds one operation may take in all: connecting with its greeting, logging in,
    or one command with its whole response. Enforced where bytes are read (``wire``)."""
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
    max_folders: int = 1000
    """Folders one LIST answer may bring; past it INBOX and the folders with a role are
    kept first, the rest in the server's order (``FolderListing.dropped`` counts them)."""
    quiet_imaplib: bool = True
    """Switch off imaplib's debug formatting, which imapclient turns on (it
    repr()s every response line and literal even when nothing is logged)."""
    ssl_context: ssl.SSLContext | None = None
    """For ``tls``/``starttls``; ``None`` = the system's verifying default."""

    def __post_init__(self) -> None:
        if self.chunk_bytes < 1 or self.stream_threshold_bytes < 0:
            raise ValueError("chunk_bytes must be positive, stream_threshold_bytes non-negative")
        if self.connect_timeout <= 0 or self.read_timeout <= 0 or self.operation_timeout <= 0:
            raise ValueError("timeouts must be positive: a socket never blocks forever")

    @property
    def literal_cap_bytes(self) -> int:
        """The largest literal a server may send us buffered: what we ask for inline is
        never larger, so a larger one is refused before it is allocated."""
        return max(self.stream_threshold_bytes, self.chunk_bytes, _LITERAL_FLOOR)

    @property
    def response_cap_bytes(self) -> int:
        """What one command's response may buffer in all: an inline group of bodies
        (each at most the literal cap) with room for its metadata and the server's news."""
        return 2 * max(self.fetch_group_bytes, self.literal_cap_bytes) + 16 * MiB
