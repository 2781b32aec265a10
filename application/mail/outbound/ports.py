"""The outbox's ports: SMTP submission (``SmtpSubmission``), the read model of outbound
messages (``OutboxReadModel``), the Sent folder as a session offers it
(``SentFolderSession``) and the uploads waiting to be attached (``UploadStore``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from application.mail.ports import Credentials, MailProviderError

SmtpSecurity = Literal["tls", "starttls"]


@dataclass(frozen=True, slots=True)
class SmtpEndpoint:
    host: str
    port: int
    security: SmtpSecurity
    username: str
    addresses: tuple[str, ...] = ()
    """The addresses the destination check approved for ``host`` (empty: resolve it)."""

    def __repr__(self) -> str:  # the username is often an address: keep it out of logs
        return f"SmtpEndpoint(host={self.host!r}, port={self.port}, security={self.security!r})"


@dataclass(frozen=True, slots=True)
class SmtpReply:
    code: int
    text: str

    def __str__(self) -> str:
        return f"{self.code} {self.text}".strip()


class SmtpError(MailProviderError):
    """A submission that did not end in the server's acceptance."""

    kind = "smtp_error"

    def __init__(self, message: str, reply: SmtpReply | None = None) -> None:
        super().__init__(message)
        self.reply = reply

    @property
    def reply_text(self) -> str:
        return str(self.reply) if self.reply is not None else str(self)


class SmtpTransient(SmtpError):
    """4xx, a network failure or a deadline before the message was handed over: retry."""

    kind = "transient"


class SmtpTimeout(SmtpTransient):
    kind = "timeout"


class SmtpRejected(SmtpError):
    """5xx: the server refused the message (or the login) for good."""

    kind = "rejected"


class SmtpOutcomeUnknown(SmtpError):
    """The whole message went out but no final answer came (the connection broke or the
    deadline passed after the end of DATA): the server may have accepted it."""

    kind = "outcome_unknown"


class SmtpAbandoned(SmtpError):
    """The caller's ``confirm`` answered no before the end of DATA: the message's end
    never went out, so the server cannot have taken it."""

    kind = "abandoned"


@dataclass(frozen=True, slots=True)
class Submission:
    sender: str
    recipients: Sequence[str]
    message: bytes


class SmtpSubmission(Protocol):
    def send(
        self,
        endpoint: SmtpEndpoint,
        credentials: Credentials,
        submission: Submission,
        *,
        account_id: str,
        deadline: float,
        confirm: Callable[[], bool] | None = None,
    ) -> SmtpReply:
        """Submit before ``deadline`` (``time.monotonic()``) over the account's kept
        connection, else a new one (connect, log in): the server's acceptance, or an
        ``SmtpError``. ``confirm``, where given, is called once the message's bytes went
        out and before its end (the line with the lone dot): False, or an exception, and
        the end is never sent (``SmtpAbandoned``, or that exception), the connection
        closed; a server takes no message without its end."""
        ...

    def close_idle(self) -> int:
        """Close kept connections idle past their time; how many."""
        ...

    def close(self) -> None:
        """Close every kept connection (shutdown)."""
        ...


@runtime_checkable
class SentFolderSession(Protocol):
    """What a mailbox session offers for the copy in Sent."""

    def find_in_sent(self, message_id_header: str) -> bool | None:
        """Whether the Sent folder holds a message with this Message-ID (None: the
        account has no Sent folder)."""
        ...

    def append_to_sent(self, message: bytes) -> bool:
        """Append ``message`` (flagged seen) to the Sent folder; False: there is none."""
        ...


@dataclass(frozen=True, slots=True)
class DuePlace:
    """A due message and its place in an account's queue (oldest queued first)."""

    queued_at: str
    outbound_id: str


class OutboxReadModel(Protocol):
    def outbound(self, tenant_id: str, outbound_id: str) -> dict[str, Any] | None: ...

    def list_outbound(
        self,
        tenant_id: str,
        account_ids: Sequence[str],
        *,
        state: str | None,
        limit: int,
    ) -> list[dict[str, Any]]: ...

    def due_outbound(self, now_iso: str, limit: int) -> list[tuple[str, str]]:
        """(outbound id, account id) of messages to act on now: waiting and due,
        ``sending`` past the claim of their attempt, or sent with a Sent copy to retry."""
        ...

    def due_of_account(
        self, account_id: str, now_iso: str, limit: int, after: DuePlace | None = None
    ) -> list[DuePlace]:
        """The account's messages to act on now (as ``due_outbound``), oldest queued
        first, from past ``after`` where given (a page of a series' scan)."""
        ...

    def queued_since(self, account_id: str, since_iso: str) -> int:
        """Messages of the account queued since then (canceled ones not counted)."""
        ...


@dataclass(frozen=True, slots=True)
class UploadRecord:
    upload_id: str
    tenant_id: str
    account_id: str
    blob_ref: str
    filename: str  # sealed under the account's key
    content_type: str
    size: int
    expires_at: str  # ISO 8601, UTC


class UploadStore(Protocol):
    def add(self, record: UploadRecord) -> None: ...

    def get(self, upload_id: str) -> UploadRecord | None: ...

    def expired(self, now: str, limit: int) -> list[UploadRecord]:
        """Uploads whose time ran out, of any tenant, oldest first."""
        ...

    def discard(self, record: UploadRecord) -> None:
        """Remove the upload and destroy its blob (idempotent)."""
        ...
