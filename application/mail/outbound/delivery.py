"""The outbox's delivery: one attempt on one outbound message, as a worker runs it.

``run(outbound_id)`` acts on what the message's stream says now:

- waiting and due: record ``sending`` (this holder, a claim until ``lease_until``)
  *before* the SMTP transaction. The store's version check lets one worker open each
  attempt; a worker that loses the race finds the message taken and leaves it.
  Then submit, and record what the server said: ``sent``; ``retrying`` (4xx, network,
  deadline: a next attempt after a growing backoff) or ``failed`` (5xx; or past the
  retry budget). After ``sent`` the copy goes to Sent (``_save_copy``).
- ``sending`` past its claim: its worker died mid-attempt and the server may have taken
  the message. It is never sent again on its own: the Sent folder is searched for its
  Message-ID (where the provider files sent mail itself, or an earlier copy was
  appended): ``sent`` when found, else ``uncertain``. A submission whose final answer
  never came (``SmtpOutcomeUnknown``) is decided the same way at once.

The claim outlasts any attempt (twice the attempt deadline plus 30 s), and the attempt's
deadline is enforced at the socket, so a live worker never sees its claim lapse.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, timedelta
from uuid import UUID

from application.context import Context
from application.destinations import HostNotAllowed, HostUnresolved
from application.errors import ConcurrencyConflict
from application.mail.access import reveal
from application.mail.outbound.compose import without_bcc
from application.mail.outbound.ports import (
    SentFolderSession,
    SmtpEndpoint,
    SmtpError,
    SmtpOutcomeUnknown,
    SmtpRejected,
    SmtpSubmission,
    Submission,
)
from application.mail.ports import (
    BlobOwner,
    Credentials,
    ImapEndpoint,
    MailProviderError,
    OpenOptions,
)
from application.streams import commit, load
from domain.mail_account import MailAccount
from domain.outbound import FINAL_STATES, Outbound, OutboundState

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

    @property
    def lease_seconds(self) -> float:
        return 2 * self.attempt_timeout + self.lease_margin


class OutboundDelivery:
    def __init__(self, ctx: Context, smtp: SmtpSubmission, settings: DeliverySettings) -> None:
        self.ctx = ctx
        self.smtp = smtp
        self.settings = settings

    def due(self, limit: int = 100) -> list[str]:
        outbox = self.ctx.mail.outbox
        if outbox is None:
            return []
        return outbox.due_outbound(self.ctx.clock.now().astimezone(UTC).isoformat(), limit)

    def run(self, outbound_id: str) -> OutboundState | None:
        """One step on the message; its state after it (None: nothing done here)."""
        outbound = load(self.ctx.store, Outbound, UUID(outbound_id))
        now = self.ctx.clock.now()
        if outbound.lapsed(now):
            return self._resolve(outbound, reason="attempt_lapsed", holder=None)
        if not outbound.due(now):
            return None
        account = load(self.ctx.store, MailAccount, UUID(outbound.account_id))
        if not account.exists:  # deleted: nothing will ever send it
            outbound.cancel(by="account_deleted", now=now)
            return outbound.state if self._commit(outbound) else None
        if account.status != "active" or not account.smtp:  # waits, out of the due list
            outbound.postpone(
                reason="account_not_active" if account.smtp else "smtp_not_configured",
                next_attempt_at=(now + timedelta(seconds=self.settings.retry_longest)).astimezone(
                    UTC
                ),
                now=now,
            )
            return outbound.state if self._commit(outbound) else None
        outbound.start_attempt(
            holder=self.settings.holder,
            lease_until=(now + timedelta(seconds=self.settings.lease_seconds)).astimezone(UTC),
            now=now,
        )
        try:
            commit(self.ctx.store, outbound)
        except ConcurrencyConflict:
            return None  # another worker took this attempt
        return self._attempt(outbound, account)

    # -- an attempt ------------------------------------------------------------------------

    def _attempt(self, outbound: Outbound, account: MailAccount) -> OutboundState | None:
        kept = self._message(outbound)
        holder = self.settings.holder
        deadline = time.monotonic() + self.settings.attempt_timeout
        try:
            if kept is None:
                raise SmtpRejected("the message can no longer be read (its key is gone)")
            reply = self.smtp.send(
                self._endpoint(account),
                self._credentials(account),
                Submission(kept.sender, kept.recipients, without_bcc(kept.message)),
                account_id=outbound.account_id,
                deadline=deadline,
            )
        except SmtpOutcomeUnknown:
            log.warning("outbound.outcome_unknown outbound_id=%s", outbound.id)
            return self._resolve(outbound, reason="no_final_answer", holder=holder)
        except (SmtpError, MailProviderError) as error:
            return self._failed_attempt(outbound, error)
        now = self.ctx.clock.now()
        outbound.sent(holder=holder, reply=str(reply), now=now)
        provider_saves = self.ctx.mail.providers.match(account.imap.get("host", "")).saves_sent
        if provider_saves:  # recorded with the send: one write
            outbound.copy_saved(outcome="provider", now=now)
        if not self._commit(outbound):
            return None
        log.info("outbound.sent outbound_id=%s attempt=%d", outbound.id, outbound.attempts)
        if not provider_saves:
            self._append_copy(outbound, account, kept.message)
        return "sent"

    def _failed_attempt(self, outbound: Outbound, error: Exception) -> OutboundState | None:
        now = self.ctx.clock.now()
        holder = self.settings.holder
        reply = error.reply_text if isinstance(error, SmtpError) else str(error)
        kind = error.kind if isinstance(error, SmtpError) else type(error).__name__
        queued_at = outbound.queued.timestamp if outbound.queued else now
        spent = (now - queued_at).total_seconds() > self.settings.retry_budget
        permanent = isinstance(error, SmtpRejected | HostNotAllowed)
        if permanent or spent:
            outbound.fail(
                holder=holder,
                reply=reply,
                error_kind="retry_budget_spent" if spent and not permanent else kind,
                now=now,
            )
        else:
            backoff = min(
                self.settings.retry_first * 2 ** max(0, outbound.attempts - 1),
                self.settings.retry_longest,
            )
            outbound.retry(
                holder=holder,
                reply=reply,
                error_kind=kind,
                next_attempt_at=(now + timedelta(seconds=backoff)).astimezone(UTC),
                now=now,
            )
        log.warning(
            "outbound.attempt_failed outbound_id=%s attempt=%d error=%s state=%s",
            outbound.id,
            outbound.attempts,
            kind,
            outbound.state,
        )
        return outbound.state if self._commit(outbound) else None

    def _commit(self, outbound: Outbound) -> bool:
        try:
            commit(self.ctx.store, outbound)
        except ConcurrencyConflict:  # our claim lapsed and another worker resolved it
            log.warning("outbound.claim_lost outbound_id=%s", outbound.id)
            return False
        return True

    # -- what an attempt needs -------------------------------------------------------------

    def _message(self, outbound: Outbound) -> Kept | None:
        """The envelope and the composed bytes (with Bcc), as queued."""
        queued = outbound.queued
        if queued is None:
            return None
        owner = (outbound.tenant_id, outbound.account_id)
        envelope = reveal(self.ctx, queued.envelope, *owner)
        content = reveal(self.ctx, queued.content, *owner)
        if envelope is None or content is None:
            return None
        fields = json.loads(envelope)
        recipients = [str(a) for key in ("to", "cc", "bcc") for a in fields.get(key, [])]
        return Kept(str(fields.get("from", "")), recipients, content.encode("latin-1"))

    def _endpoint(self, account: MailAccount) -> SmtpEndpoint:
        smtp = account.smtp
        host, port = str(smtp["host"]), int(smtp["port"])
        try:
            addresses = self.ctx.mail.destinations.approved(host, port)
        except HostUnresolved as error:
            raise SmtpError(str(error)) from None  # transient: DNS may answer later
        username = reveal(self.ctx, smtp.get("username"), account.tenant_id, str(account.id))
        return SmtpEndpoint(
            host,
            port,
            "tls" if smtp.get("security") == "tls" else "starttls",
            username or "",
            tuple(str(a) for a in addresses),
        )

    def _credentials(self, account: MailAccount) -> Credentials:
        own = self.ctx.mail.smtp_secrets
        if account.auth_method == "password" and own is not None:
            smtp_secret = own.get(str(account.id))  # ``smtpSecret``, where one was given
            if smtp_secret is not None:
                return Credentials("password", smtp_secret)
        secret = self.ctx.mail.secrets.get(str(account.id))
        if secret is None:
            raise SmtpRejected("no usable secret for the account")
        return Credentials(account.auth_method, secret)

    # -- the Sent folder -------------------------------------------------------------------

    def _sent_session(self, account: MailAccount) -> SentFolderSession | None:
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

    def _resolve(
        self, outbound: Outbound, *, reason: str, holder: str | None
    ) -> OutboundState | None:
        """Decide an attempt that may have reached the server by the Sent folder."""
        queued = outbound.queued
        message_id = (
            reveal(self.ctx, queued.message_id_header, outbound.tenant_id, outbound.account_id)
            if queued
            else None
        )
        found: bool | None = None
        why = f"{reason}; no sent folder to search"
        account = load(self.ctx.store, MailAccount, UUID(outbound.account_id))
        if message_id is not None and account.exists:
            try:
                session = self._sent_session(account)
                if session is not None:
                    try:
                        found = session.find_in_sent(message_id)
                    finally:
                        session.close()  # type: ignore[attr-defined]
            except MailProviderError as error:
                log.warning(
                    "outbound.sent_search_failed outbound_id=%s error=%s", outbound.id, error
                )
        now = self.ctx.clock.now()
        why = reason if found is not None else f"{reason}; no sent folder to search"
        outbound.resolve(found=bool(found), reason=why, now=now, holder=holder)
        if not self._commit(outbound):
            return None
        log.warning("outbound.resolved outbound_id=%s state=%s", outbound.id, outbound.state)
        return outbound.state

    def _append_copy(self, outbound: Outbound, account: MailAccount, message: bytes) -> None:
        """The copy in Sent, with its Bcc header (the provider does not file one)."""
        try:
            session = self._sent_session(account)
            if session is None:
                outcome = "no_sent_folder"
            else:
                try:
                    appended = session.append_to_sent(message)
                finally:
                    session.close()  # type: ignore[attr-defined]
                outcome = "appended" if appended else "no_sent_folder"
        except MailProviderError as error:
            log.warning("outbound.copy_failed outbound_id=%s error=%s", outbound.id, error)
            outcome = "failed"
        outbound.copy_saved(outcome=outcome, now=self.ctx.clock.now())
        self._commit(outbound)


@dataclass(frozen=True)
class Kept:
    """What the outbox keeps of a message: its envelope and its bytes (with Bcc)."""

    sender: str
    recipients: list[str]
    message: bytes


def is_final(state: str | None) -> bool:
    return state in FINAL_STATES
