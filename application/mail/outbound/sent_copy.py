"""The outbox and the account's Sent folder: deciding an attempt that may have reached
the server by its Message-ID there (``resolve``), and the copy appended after a send
(``append_copy``), retried when the APPEND failed (``retry_copy``).

A failed APPEND is not lost: the message records ``OutboundCopyRetrying`` with a next
try (the backoff of sends: ``send_retry_first`` doubled per try, at most
``send_retry_longest``) and the outbox thread's scan finds it due. A retry first claims
the try in the store (one worker makes it), then searches Sent for the Message-ID (an
APPEND whose answer was lost may have stored it: no second copy), then appends. After
``MAX_COPY_ATTEMPTS`` tries the copy is recorded ``failed`` for good. Each try is one
account's own IMAP session: a failing server delays only that account's copies.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, timedelta
from uuid import UUID

from application.context import Context
from application.errors import ConcurrencyConflict
from application.mail.access import reveal
from application.mail.outbound.ports import SentFolderSession
from application.mail.ports import (
    BlobOwner,
    Credentials,
    ImapEndpoint,
    MailProviderError,
    OpenOptions,
)
from application.streams import commit, load
from domain.mail_account import MailAccount
from domain.outbound import MAX_COPY_ATTEMPTS, Outbound, OutboundState

log = logging.getLogger("tidings.outbound")


@dataclass(frozen=True)
class DeliverySettings:
    holder: str  # this worker
    attempt_timeout: float = 60.0  # one attempt in all: connect, TLS, login, DATA
    retry_first: float = 30.0  # the first backoff; doubled per attempt
    retry_longest: float = 3600.0
    retry_budget: float = 2 * 86400.0  # after this long since queued: failed
    imap_timeout: float = 60.0  # searching or appending to Sent
    lease_margin: float = 30.0  # the claim: twice the attempt's deadline plus this
    connections_per_account: int = 1  # a series' lanes where the provider says none

    @property
    def lease_seconds(self) -> float:
        return 2 * self.attempt_timeout + self.lease_margin

    def backoff(self, attempt: int) -> float:
        return float(min(self.retry_first * 2 ** max(0, attempt - 1), self.retry_longest))


@dataclass(frozen=True)
class Kept:
    """What the outbox keeps of a message: its envelope and its bytes (with Bcc)."""

    sender: str
    recipients: list[str]
    message: bytes


def kept_message(ctx: Context, outbound: Outbound) -> Kept | None:
    """The envelope and the composed bytes (with Bcc), as queued."""
    queued = outbound.queued
    if queued is None:
        return None
    owner = (outbound.tenant_id, outbound.account_id)
    envelope = reveal(ctx, queued.envelope, *owner)
    content = reveal(ctx, queued.content, *owner)
    if envelope is None or content is None:
        return None
    fields = json.loads(envelope)
    recipients = [str(a) for key in ("to", "cc", "bcc") for a in fields.get(key, [])]
    return Kept(str(fields.get("from", "")), recipients, content.encode("latin-1"))


def committed(ctx: Context, outbound: Outbound) -> bool:
    try:
        commit(ctx.store, outbound)
    except ConcurrencyConflict:  # our claim lapsed and another worker resolved it
        log.warning("outbound.claim_lost outbound_id=%s", outbound.id)
        return False
    return True


class SentFolder:
    def __init__(self, ctx: Context, settings: DeliverySettings) -> None:
        self.ctx = ctx
        self.settings = settings

    def _session(self, account: MailAccount) -> SentFolderSession | None:
        account_id = str(account.id)
        secret = self.ctx.mail.secrets.get(account_id)
        if secret is None:
            return None
        imap = account.imap
        endpoint = ImapEndpoint(
            host=imap["host"],
            port=int(imap["port"]),
            security=imap["security"],
            username=reveal(self.ctx, imap.get("username"), account.tenant_id, account_id) or "",
        )
        options = OpenOptions(
            account_id,
            BlobOwner(account.tenant_id, account_id),
            time.monotonic() + self.settings.imap_timeout,
        )
        session = self.ctx.mail.provider.open(
            endpoint, Credentials(account.auth_method, secret), options
        )
        if not isinstance(session, SentFolderSession):
            session.close()
            return None
        return session

    def _message_id(self, outbound: Outbound) -> str | None:
        queued = outbound.queued
        if queued is None:
            return None
        return reveal(self.ctx, queued.message_id_header, outbound.tenant_id, outbound.account_id)

    def _find(self, account: MailAccount, message_id: str) -> bool | None:
        """Whether Sent holds the Message-ID (None: no Sent folder to search)."""
        session = self._session(account)
        if session is None:
            return None
        try:
            return session.find_in_sent(message_id)
        finally:
            session.close()  # type: ignore[attr-defined]

    # -- an attempt that may have reached the server ---------------------------------------

    def resolve(
        self, outbound: Outbound, *, reason: str, holder: str | None
    ) -> OutboundState | None:
        """Decide an attempt that may have reached the server by the Sent folder."""
        message_id = self._message_id(outbound)
        found: bool | None = None
        account = load(self.ctx.store, MailAccount, UUID(outbound.account_id))
        if message_id is not None and account.exists:
            try:
                found = self._find(account, message_id)
            except MailProviderError as error:
                log.warning(
                    "outbound.sent_search_failed outbound_id=%s error=%s", outbound.id, error
                )
        now = self.ctx.clock.now()
        why = reason if found is not None else f"{reason}; no sent folder to search"
        outbound.resolve(found=bool(found), reason=why, now=now, holder=holder)
        if not committed(self.ctx, outbound):
            return None
        log.warning("outbound.resolved outbound_id=%s state=%s", outbound.id, outbound.state)
        return outbound.state

    # -- the copy --------------------------------------------------------------------------

    def append_copy(self, outbound: Outbound, account: MailAccount, message: bytes) -> bool:
        """The copy in Sent, with its Bcc header (the provider does not file one);
        whether its outcome was recorded."""
        try:
            outcome = self._append(account, message)
        except MailProviderError as error:
            log.warning("outbound.copy_failed outbound_id=%s error=%s", outbound.id, error)
            self._copy_failed(outbound, str(error) or type(error).__name__)
        else:
            outbound.copy_saved(outcome=outcome, now=self.ctx.clock.now())
        return committed(self.ctx, outbound)

    def _append(self, account: MailAccount, message: bytes) -> str:
        session = self._session(account)
        if session is None:
            return "no_sent_folder"
        try:
            appended = session.append_to_sent(message)
        finally:
            session.close()  # type: ignore[attr-defined]
        return "appended" if appended else "no_sent_folder"

    def _copy_failed(self, outbound: Outbound, error: str) -> None:
        now = self.ctx.clock.now()
        tries = max(outbound.copy_attempts, 1)
        if tries >= MAX_COPY_ATTEMPTS:
            outbound.copy_saved(outcome="failed", now=now)
            return
        later = now + timedelta(seconds=self.settings.backoff(tries))
        outbound.copy_retrying(error=error, next_attempt_at=later.astimezone(UTC), now=now)

    def retry_copy(self, outbound: Outbound) -> OutboundState | None:
        """Another try at a copy whose APPEND failed: claimed, looked for, appended."""
        now = self.ctx.clock.now()
        claim = now + timedelta(seconds=2 * self.settings.imap_timeout + 30)
        outbound.copy_retrying(error="claimed", next_attempt_at=claim.astimezone(UTC), now=now)
        if not committed(self.ctx, outbound):
            return None  # another worker makes this try
        account = load(self.ctx.store, MailAccount, UUID(outbound.account_id))
        kept = kept_message(self.ctx, outbound)
        message_id = self._message_id(outbound)
        if not account.exists or kept is None or message_id is None:
            outbound.copy_saved(outcome="failed", now=now)
            return outbound.state if committed(self.ctx, outbound) else None
        try:
            found = self._find(account, message_id)
            outcome = "appended" if found else self._append(account, kept.message)
        except MailProviderError as error:
            log.warning("outbound.copy_failed outbound_id=%s error=%s", outbound.id, error)
            self._copy_failed(outbound, str(error) or type(error).__name__)
        else:
            outbound.copy_saved(outcome=outcome, now=self.ctx.clock.now())
        log.info("outbound.copy_retried outbound_id=%s copy=%s", outbound.id, outbound.copy)
        return outbound.state if committed(self.ctx, outbound) else None
