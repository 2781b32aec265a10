"""Ports of the mail feature: reading a mailbox, storing raw MIME, OAuth tokens.

Adapters live in ``infrastructure`` (``infrastructure.imap``,
``infrastructure.blobs.filesystem``); test fakes live in ``tests``. Everything here is
standard library only and does no I/O.

Fetch contract (``MailboxSession.fetch_since``):

- The cursor is ``{uidvalidity, last_uid, highestmodseq}``. ``None`` means a
  first sync: it backfills the messages present at that moment (UIDs below
  UIDNEXT, remembered as ``backfill_until``) whose INTERNALDATE is on or after
  ``backfill_since``, page by page; older mail present then is skipped for
  good. Once the backfill is done, pages continue by UID from the cursor, so
  they take every message that arrived after that point, whatever its date.
- When the mailbox's UIDVALIDITY differs from the cursor's, ``fetch_since``
  raises ``MailboxCursorInvalid`` and fetches nothing. The caller resets (calls
  again with ``None``) and relies on dedup by ``provider_message_id``, which
  survives the change.
- ``fetch_after_idle`` (a watch: the session stayed in the mailbox, IDLE said new
  mail came) takes UIDs from the session's last EXAMINE instead of opening the
  mailbox again; searches are open-ended, so nothing new is missed, and a
  UIDVALIDITY change is left to the next fresh pass (the reconciliation poll).
- ``has_more`` means another call with ``new_cursor`` may return more now.
  Save ``new_cursor`` only after the batch is ingested.
- A message's body comes inline (``raw``) when small, as a blob ref when it
  was streamed to the blob store in chunks, or not at all when it is over the
  size cap (``too_large``: metadata only). Messages expunged between search
  and fetch are skipped; the cursor moves past them.
- Past the account's daily download budget (``DownloadMeter``) a message comes
  ``deferred``: its metadata and its header block (``header``), no body. The cursor
  moves past it like any other; ``fetch_deferred`` fetches its body later by UID.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from types import TracebackType
from typing import BinaryIO, Literal, Protocol, Self, runtime_checkable

from application.errors import ApplicationError
from application.mail.folder_listing import FolderListing

Security = Literal["tls", "starttls", "none"]
AuthMethod = Literal["password", "xoauth2"]
BodyState = Literal["inline", "blob", "too_large", "deferred"]


@dataclass(frozen=True, slots=True)
class ImapEndpoint:
    host: str
    port: int
    security: Security
    username: str
    addresses: tuple[str, ...] = ()
    """The addresses the destination check approved for ``host``: the connection goes to
    one of them and never resolves the name again (empty: resolve ``host``)."""

    def __repr__(self) -> str:  # the username is often an address: keep it out of logs
        return (
            f"ImapEndpoint(host={self.host!r}, port={self.port}, "
            f"security={self.security!r}, username=<redacted>)"
        )


@dataclass(frozen=True, slots=True)
class Credentials:
    """A password, or for ``xoauth2`` an access token used when no TokenProvider is wired."""

    method: AuthMethod
    secret: str

    def __repr__(self) -> str:
        return f"Credentials(method={self.method!r}, secret=<redacted>)"


@dataclass(frozen=True, slots=True)
class MailboxStatus:
    uidvalidity: int
    uidnext: int | None
    highestmodseq: int | None
    exists: int


@dataclass(frozen=True, slots=True)
class MailboxCursor:
    uidvalidity: int
    last_uid: int
    highestmodseq: int | None = None
    backfill_until: int | None = None
    """Set while a first sync's backfill is paged: UIDs up to here are taken only
    when inside the backfill window; None once the backfill is done."""


@dataclass(frozen=True, slots=True)
class MessageRef:
    """What the server says about a message before its body is read."""

    uid: int
    provider_message_id: str
    size: int
    internal_date: datetime | None
    flags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchedMessage:
    ref: MessageRef
    raw: bytes | None = field(default=None, repr=False)
    blob_ref: str | None = None
    streamed_sha256: bytes | None = None  # of a body streamed to ``blob_ref``, as it streamed
    deferred: bool = False  # past the download budget: metadata first, the body later
    header: bytes | None = field(default=None, repr=False)  # a deferred message's header block

    def __post_init__(self) -> None:
        if self.raw is not None and self.blob_ref is not None:
            raise ValueError("a fetched message has raw bytes or a blob ref, not both")
        if self.deferred and (self.raw is not None or self.blob_ref is not None):
            raise ValueError("a deferred message has no body")

    def body_sha256(self) -> bytes | None:
        """The SHA-256 of the message's bytes, inline or streamed; None without a body."""
        if self.raw is not None:
            return hashlib.sha256(self.raw).digest()
        return self.streamed_sha256

    @property
    def state(self) -> BodyState:
        if self.deferred:
            return "deferred"
        if self.raw is not None:
            return "inline"
        return "blob" if self.blob_ref is not None else "too_large"

    @property
    def uid(self) -> int:
        return self.ref.uid

    @property
    def provider_message_id(self) -> str:
        return self.ref.provider_message_id


@dataclass(frozen=True, slots=True)
class FetchBatch:
    messages: tuple[FetchedMessage, ...]
    new_cursor: MailboxCursor
    has_more: bool


@dataclass(frozen=True, slots=True)
class DeferredFetch:
    """The bodies ``fetch_deferred`` brought, by UID, and what it could not."""

    messages: tuple[FetchedMessage, ...]  # never deferred: inline, blob or too_large
    gone: tuple[int, ...]  # UIDs the mailbox no longer has (expunged)
    uidvalidity: int  # the mailbox's, when the UIDs were asked for


@dataclass(frozen=True, slots=True)
class IdleNews:
    """What arrived on an idling connection since the last read."""

    exists: bool = False  # the mailbox grew: fetch
    closed: bool = False  # the server hung up (BYE, EOF): the watch must restart
    heard: bool = False  # anything at all arrived (keepalives count: the socket lives)
    answered: bool = False  # the server answered a liveness probe (``idle_probe``)


# -- errors ------------------------------------------------------------------


class MailProviderError(ApplicationError):
    """Base of what a mail provider raises. Messages hold no secret, address or mail text."""


class MailboxAuthError(MailProviderError):
    """The server refused the credentials (or the token); retrying will not help."""


class MailboxReauthRequired(MailboxAuthError):
    """The OAuth2 token server refused the refresh token (``invalid_grant``): the account
    waits for a new grant (status ``reauth_required``), keeping its ids and mail."""


class MailboxThrottled(MailProviderError):
    """The server asks us to slow down; ``retry_after`` seconds when it said so."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class MailboxCursorInvalid(MailProviderError):
    """The mailbox's UIDVALIDITY changed: the cursor no longer means anything."""

    def __init__(self, message: str, *, expected: int, actual: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class MailboxTransientError(MailProviderError):
    """Timeouts, dropped connections, server hiccups: try again on the next tick."""


class MailboxAnswerTooLarge(MailboxTransientError):
    """An answer passed what the session reads (a line past 1 MB, or the bytes one
    operation may buffer): the connection is dropped; asking the same again would fail
    the same way."""


class MailboxTimeout(MailboxTransientError):
    """An operation's deadline (or the session's) passed before the server answered."""


class MailboxUnreachable(MailboxTransientError):
    """No connection could be made: DNS, refused, no route, TLS handshake rejected."""


class IdleUnsupported(MailProviderError):
    """The server has no IDLE: the account can only be polled."""


class BlobStoreError(ApplicationError):
    """Base of what a blob store raises."""


class BlobNotFound(BlobStoreError):
    pass


# -- protocols ---------------------------------------------------------------


class MailboxSession(Protocol):
    """One logged-in connection. Use as a context manager; not thread-safe."""

    @property
    def capabilities(self) -> frozenset[str]: ...

    def select_inbox(self) -> MailboxStatus:
        """Open INBOX read-only and return its status."""
        ...

    def fetch_since(
        self,
        cursor: MailboxCursor | None,
        *,
        backfill_since: date,
        limit: int,
    ) -> FetchBatch:
        """The next page after ``cursor``. May be called while idling: the session leaves
        IDLE itself."""
        ...

    def fetch_after_idle(
        self,
        cursor: MailboxCursor | None,
        *,
        backfill_since: date,
        limit: int,
    ) -> FetchBatch:
        """``fetch_since`` for a watch after IDLE said mail came: no re-opening of the
        mailbox, and the session may be back in IDLE when this returns."""
        ...

    def fetch_deferred(
        self, uids: Sequence[int], *, uidvalidity: int, folder: str = "INBOX"
    ) -> DeferredFetch:
        """The bodies of deferred messages of ``folder`` by UID, in UID order, while the
        download budget allows (the rest are not in the answer); none when the folder's
        UIDVALIDITY is no longer ``uidvalidity`` (the answer's own says so)."""
        ...

    def verify(self) -> None:
        """Raise unless INBOX can be opened (login already succeeded in ``open``)."""
        ...

    def idle_start(self) -> IdleNews:
        """Enter IDLE on the selected INBOX (raise ``IdleUnsupported`` without IDLE), if
        not idling already; then what the server has said since IDLE began (mail that
        came while the session was outside IDLE is announced at once)."""
        ...

    def idle_fileno(self) -> int:
        """The socket to wait on (selectors) while idling."""
        ...

    def idle_read(self) -> IdleNews:
        """Drain what the server sent while idling, without blocking."""
        ...

    def idle_done(self) -> None:
        """Leave IDLE (nothing to do when not idling); the session takes commands again."""
        ...

    def idle_probe(self) -> None:
        """Ask an idling connection whether it lives (DONE + IDLE in one write), without
        waiting: a later ``idle_read`` reports the answer (``IdleNews.answered``). The
        session stays idling either way."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class FolderSession(Protocol):
    """A logged-in session that lists folders and pages through one other than INBOX
    (``ImapMailboxSession``); the poll's folder pass needs it, a session without it
    syncs INBOX only."""

    def list_folders(self) -> FolderListing: ...

    def fetch_folder(
        self, folder: str, cursor: MailboxCursor | None, *, backfill_since: date, limit: int
    ) -> FetchBatch:
        """``fetch_since`` in ``folder`` (its decoded name), with that folder's cursor
        (raises ``MailboxCursorInvalid`` when its UIDVALIDITY changed)."""
        ...

    def folder_exists(self, folder: str) -> bool:
        """Whether the server still has ``folder`` (a listing left it out): True when
        STATUS answers OK, False when it answers that the folder does not exist; any
        other answer raises a ``MailProviderError`` (nothing decided)."""
        ...


class FolderDiscovery(Protocol):
    """A logged-in session that lists the account's folders (``ImapMailboxSession``)."""

    def list_folders(self) -> FolderListing:
        """One LIST (with SPECIAL-USE and LIST-STATUS where offered, checked before the
        round trip; a second for MAILBOXIDs with OBJECTID): INBOX and the other folders,
        bounded in count and shape."""
        ...


@dataclass(frozen=True, slots=True)
class BlobOwner:
    """Whose mail a blob holds: owned blobs are sealed under the account's key, so
    shredding that key erases them, and they are removed with the account."""

    tenant_id: str
    account_id: str


@dataclass(frozen=True, slots=True)
class OpenOptions:
    """How a session is opened, one value every provider decorator passes on as it is.

    ``account_id``: whose session (connection caps, OAuth2 tokens, logs). Bodies the
    session streams to the blob store are stored as ``blob_owner``'s. ``deadline``
    (``time.monotonic()``) bounds everything the session does, connecting included:
    past it every call raises ``MailboxTimeout``. ``qresync``: ENABLE QRESYNC where
    offered (a poll's session; never the watch's, whose EXPUNGE handling stays as is)."""

    account_id: str
    blob_owner: BlobOwner | None = None
    deadline: float | None = None
    qresync: bool = False


class MailProvider(Protocol):
    def open(
        self, endpoint: ImapEndpoint, credentials: Credentials, options: OpenOptions
    ) -> MailboxSession:
        """Connect and log in, or raise a ``MailProviderError``."""
        ...


class BlobStore(Protocol):
    """Content-addressed storage of raw MIME. Refs are opaque strings: ``sha256:<hex>``
    for unowned blobs; owned ones name their owner and a keyed digest instead."""

    def put_stream(self, chunks: Iterable[bytes], *, owner: BlobOwner | None = None) -> str:
        """Store the concatenated chunks without holding them all in memory."""
        ...

    def put_packed(self, items: Sequence[tuple[BlobOwner, bytes]]) -> list[str | None]:
        """Store many small owned blobs, of any accounts, durably with one sync for all;
        their refs in order, None for a blob whose account's key is erased."""
        ...

    def delete_owner(self, owner: BlobOwner) -> None:
        """Remove every blob of the owner (idempotent)."""
        ...

    def open(self, ref: str, *, owner: BlobOwner | None = None) -> BinaryIO:
        """A binary file positioned at the start; raise ``BlobNotFound``. With ``owner``:
        ``BlobNotFound`` too unless the ref is a blob of that owner."""
        ...


class TokenProvider(Protocol):
    def get_access_token(self, account_id: str, *, refused: str | None = None) -> str:
        """A currently valid OAuth2 access token for the account's mailbox; ``refused``:
        a token the server just refused, not to be returned again without a refresh."""
        ...


class DownloadMeter(Protocol):
    """One account's daily download budget, as a session spends it."""

    def allowance(self) -> int:
        """Bytes of bodies that may still be fetched today before bodies are deferred
        (zero or less: defer every body not already downloaded)."""
        ...

    def spend(self, nbytes: int) -> None:
        """Count ``nbytes`` just downloaded against today's budget."""
        ...


class DownloadBudgets(Protocol):
    def meter(self, account_id: str, host: str) -> DownloadMeter | None:
        """The account's meter when its host's provider sets a budget, else None."""
        ...
