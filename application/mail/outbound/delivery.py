"""The outbox's delivery: attempts on outbound messages, as a worker runs them.

``run(outbound_id)`` acts on what the message's stream says now:

- waiting and due: record ``sending`` (this holder, a claim until ``lease_until``)
  *before* the SMTP transaction. The store's version check lets one worker open each
  attempt; a worker that loses the race finds the message taken and leaves it.
  Then submit, and record what the server said: ``sent``; ``retrying`` (4xx, network,
  deadline: a next attempt after a growing backoff) or ``failed`` (5xx; or past the
  retry budget). After ``sent`` the copy goes to Sent (``SentFolder.append_copy``).
- ``sending`` past its claim: its worker died mid-attempt and the server may have taken
  the message. It is never sent again on its own: the Sent folder is searched for its
  Message-ID (where the provider files sent mail itself, or an earlier copy was
  appended): ``sent`` when found, else ``uncertain``. A submission whose final answer
  never came (``SmtpOutcomeUnknown``) is decided the same way at once.
- ``sent`` with a Sent copy to try again: ``SentFolder.retry_copy``.

``run_series(account_id, take)`` is one sender for one account: its due messages one
after another (those ``take`` hands over, then the read model's), each claimed under the
same rules, over the connection the SMTP port keeps for the account
(``application.mail.outbound.series``). A message's ``sent`` is recorded in one write
with the ``sending`` of the next, once the next message's bytes went out; the end of its
data waits for that write. The crash semantics are those of
two writes, since ``sent`` still follows the server's ``250`` and ``sending`` still
precedes the end of the next DATA; a crash between the ``250`` and that write leaves the
message ``sending``, decided by the Sent folder as above.

The claim outlasts any attempt (twice the attempt deadline plus 30 s, plus the IMAP
deadline when the previous message's Sent copy is appended first), and the attempt's
deadline is enforced at the socket, so a live worker never sees its claim lapse.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, timedelta
from uuid import UUID

from application.context import Context
from application.destinations import HostNotAllowed, HostUnresolved
from application.errors import ConcurrencyConflict
from application.mail.access import reveal
from application.mail.outbound.compose import without_bcc
from application.mail.outbound.ports import (
    SmtpAbandoned,
    SmtpEndpoint,
    SmtpError,
    SmtpOutcomeUnknown,
    SmtpRejected,
    SmtpSubmission,
    Submission,
)
from application.mail.outbound.sent_copy import (
    DeliverySettings,
    Kept,
    SentFolder,
    committed,
    kept_message,
)
from application.mail.outbound.series import (
    SERIES_LIMIT,
    AccountSeries,
    Claim,
    Loaded,
    Places,
)
from application.mail.ports import Credentials, MailProviderError
from application.streams import commit, load, replay
from domain.mail_account import MailAccount
from domain.outbound import FINAL_STATES, Outbound, OutboundState

__all__ = ["SERIES_LIMIT", "DeliverySettings", "Kept", "OutboundDelivery", "is_final"]

log = logging.getLogger("tidings.outbound")
CREDENTIALS_TTL = 5.0  # seconds an account's SMTP credentials are used as read
SETTLED_KEPT = 10_000  # ids of messages this worker settled, remembered (the newest)


Step = Claim | OutboundState | None


class OutboundDelivery:
    def __init__(self, ctx: Context, smtp: SmtpSubmission, settings: DeliverySettings) -> None:
        self.ctx = ctx
        self.smtp = smtp
        self.settings = settings
        self.sent_folder = SentFolder(ctx, settings)
        self.places = Places()  # where each account's last series left its queue
        self._credentials_seen: dict[str, tuple[int, float, Credentials]] = {}
        self._settled: OrderedDict[str, None] = OrderedDict()
        self._settled_lock = threading.Lock()

    def settled(self, outbound_id: str) -> bool:
        """This worker recorded the message's last step (final, its Sent copy done too):
        nothing to load when a lagging read model still offers it."""
        with self._settled_lock:
            return outbound_id in self._settled

    def _settle(self, outbound: Outbound) -> None:
        copy_pending = outbound.state == "sent" and outbound.copy in (None, "retrying")
        if outbound.state not in FINAL_STATES or copy_pending:
            return
        with self._settled_lock:
            self._settled[str(outbound.id)] = None
            if len(self._settled) > SETTLED_KEPT:
                self._settled.popitem(last=False)

    def due(self, limit: int = 100) -> list[str]:
        return [outbound_id for outbound_id, _ in self.due_by_account(limit)]

    def due_by_account(self, limit: int = 100) -> list[tuple[str, str]]:
        """(outbound id, account id) of the messages to act on now."""
        outbox = self.ctx.mail.outbox
        if outbox is None:
            return []
        return outbox.due_outbound(self.ctx.clock.now().astimezone(UTC).isoformat(), limit)

    def close_idle(self) -> None:
        """Kept SMTP connections idle past their time are closed (every worker turn)."""
        self.smtp.close_idle()

    def close(self) -> None:
        self.smtp.close()

    def run(self, outbound_id: str) -> OutboundState | None:
        """One step on the message; its state after it (None: nothing done here)."""
        step = self.prepare(outbound_id)
        if not isinstance(step, Claim):
            return step
        try:
            commit(self.ctx.store, step.outbound)
        except ConcurrencyConflict:
            return None  # another worker took this attempt
        outcome = self.submit(step)
        if not isinstance(outcome, Kept):
            return outcome
        recorded, _ = self.record_sent(step.outbound, None)
        if not recorded:
            return None
        if not self.provider_saves(step.account):
            self.save_copy(step, outcome)
        return "sent"

    def run_series(
        self,
        account_id: str,
        take: Callable[[], str | None],
        limit: int = SERIES_LIMIT,
        stopping: Callable[[], bool] = lambda: False,
    ) -> int:
        """The account's due messages one after another (see the module's text); the
        number of attempts made. ``stopping``: the worker is shutting down (no new
        message is started; one whose attempt is recorded is still sent)."""
        return AccountSeries(self, account_id, take, limit, stopping).run()

    def prepare(  # noqa: PLR0911 - one answer per state of the message
        self,
        outbound_id: str,
        *,
        account_id: str | None = None,
        extra_lease: float = 0.0,
        quiet: bool = False,
        loaded: Loaded | None = None,
    ) -> Step:
        """The message with its attempt opened but not yet recorded, or what became of
        it here (a lapsed attempt resolved, a copy retried, a message canceled or
        postponed); None: nothing to do. ``quiet``: only an attempt to open, nothing
        else done (the previous message's ``sent`` waits for this). ``loaded``: its
        stream's events and its account, read by the caller a moment ago (a series'
        page); a claim from them that is out of date meets the store's version check."""
        outbound, account = self._load(outbound_id, account_id, loaded)
        if account_id is not None and outbound.account_id != account_id:
            return None
        now = self.ctx.clock.now()
        if quiet and not outbound.due(now):
            return None
        if outbound.lapsed(now):
            return self.sent_folder.resolve(outbound, reason="attempt_lapsed", holder=None)
        if outbound.copy_due(now):
            return self.sent_folder.retry_copy(outbound)
        if not outbound.due(now):
            return None
        if account is None:
            account = load(self.ctx.store, MailAccount, UUID(outbound.account_id))
        if quiet and (not account.exists or account.status != "active" or not account.smtp):
            return None
        if not account.exists:  # deleted: nothing will ever send it
            outbound.cancel(by="account_deleted", now=now)
            return outbound.state if committed(self.ctx, outbound) else None
        if account.status != "active" or not account.smtp:  # waits, out of the due list
            outbound.postpone(
                reason="account_not_active" if account.smtp else "smtp_not_configured",
                next_attempt_at=(now + timedelta(seconds=self.settings.retry_longest)).astimezone(
                    UTC
                ),
                now=now,
            )
            return outbound.state if committed(self.ctx, outbound) else None
        lease = self.settings.lease_seconds + extra_lease
        outbound.start_attempt(
            holder=self.settings.holder,
            lease_until=(now + timedelta(seconds=lease)).astimezone(UTC),
            now=now,
        )
        return Claim(outbound, account)

    def _load(
        self, outbound_id: str, account_id: str | None, loaded: Loaded | None
    ) -> tuple[Outbound, MailAccount | None]:
        """The message, and its account where the caller knows it (a series): both
        streams in one read, unless its page read them."""
        stream = UUID(outbound_id)
        if loaded is not None:
            return replay(Outbound, stream, loaded.events), loaded.account
        if account_id is None:
            return load(self.ctx.store, Outbound, stream), None
        streams = self.ctx.store.load_many([stream, UUID(account_id)])
        account = replay(MailAccount, UUID(account_id), streams[UUID(account_id)])
        return replay(Outbound, stream, streams[stream]), account

    def provider_saves(self, account: MailAccount) -> bool:
        return self.ctx.mail.providers.match(account.imap.get("host", "")).saves_sent

    def lanes(self, account: MailAccount) -> int:
        """SMTP sessions the account's series runs at once (its provider's figure)."""
        return self.ctx.mail.providers.send_connections(
            account.imap.get("host", ""), self.settings.connections_per_account
        )

    # -- an attempt ------------------------------------------------------------------------

    def submit(
        self, claim: Claim, confirm: Callable[[], bool] | None = None
    ) -> Kept | OutboundState | None:
        """Submit the claimed message. Accepted: its bytes, with ``sent`` applied to the
        message, not yet recorded. Else what was recorded (None: nothing, the attempt
        was not ours). ``confirm`` (a series' write of the claim, still in flight) is
        waited for before the end of the data goes out, and before a failure is
        recorded: no, and the attempt was not ours."""
        outbound, account = claim.outbound, claim.account
        kept = kept_message(self.ctx, outbound)
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
                confirm=confirm,
            )
        except SmtpAbandoned:
            log.info("outbound.claim_lost_before_end outbound_id=%s", outbound.id)
            return None
        except SmtpOutcomeUnknown:
            log.warning("outbound.outcome_unknown outbound_id=%s", outbound.id)
            return self.sent_folder.resolve(outbound, reason="no_final_answer", holder=holder)
        except (SmtpError, MailProviderError) as error:
            if confirm is not None and not confirm():
                return None  # the claim was another worker's: nothing of ours to record
            return self._failed_attempt(outbound, error)
        now = self.ctx.clock.now()
        outbound.sent(holder=holder, reply=str(reply), now=now)
        if self.provider_saves(account):  # recorded with the send: one write
            outbound.copy_saved(outcome="provider", now=now)
        return kept

    def save_copy(self, claim: Claim, kept: Kept) -> None:
        """The Sent copy of a message recorded ``sent`` (where the provider does not)."""
        try:
            if self.sent_folder.append_copy(claim.outbound, claim.account, kept.message):
                self._settle(claim.outbound)
        except Exception as error:  # the store gone, say: the next claim is still sent
            log.warning(
                "outbound.copy_failed outbound_id=%s error=%s",
                claim.outbound.id,
                type(error).__name__,
            )

    def record_sent(self, outbound: Outbound, after: Claim | None) -> tuple[bool, Claim | None]:
        """``sent`` (with the next message's ``sending`` where there is one) in one write;
        when the next was taken meanwhile, ``sent`` alone. Whether ``sent`` was
        recorded, and the next claim where it was too."""
        mine = outbound.collect()
        recorded, claimed = True, None
        if after is not None:
            try:
                self.ctx.store.append([*mine, *after.outbound.collect()])
                claimed = after
            except ConcurrencyConflict:
                pass  # the next message's claim, or ours: ours alone tells which
        if claimed is None:
            try:
                self.ctx.store.append(mine)
            except ConcurrencyConflict:  # our claim lapsed and another worker resolved it
                log.warning("outbound.claim_lost outbound_id=%s", outbound.id)
                recorded = False
        if recorded:
            log.info("outbound.sent outbound_id=%s attempt=%d", outbound.id, outbound.attempts)
            self._settle(outbound)
        return recorded, claimed

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
            backoff = self.settings.backoff(outbound.attempts)
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
        return outbound.state if committed(self.ctx, outbound) else None

    # -- what an attempt needs -------------------------------------------------------------

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
        """The account's SMTP credentials, read again when the account changed (a new
        secret is recorded on the account) and at least every ``CREDENTIALS_TTL``
        seconds: a series does not read two secret tables per message."""
        account_id, now = str(account.id), time.monotonic()
        seen = self._credentials_seen.get(account_id)
        if seen is not None and seen[0] == account.version and now - seen[1] < CREDENTIALS_TTL:
            return seen[2]
        credentials = self._read_credentials(account)
        if len(self._credentials_seen) >= 256:
            self._credentials_seen.clear()
        self._credentials_seen[account_id] = (account.version, now, credentials)
        return credentials

    def _read_credentials(self, account: MailAccount) -> Credentials:
        own = self.ctx.mail.smtp_secrets
        if account.auth_method == "password" and own is not None:
            smtp_secret = own.get(str(account.id))  # ``smtpSecret``, where one was given
            if smtp_secret is not None:
                return Credentials("password", smtp_secret)
        secret = self.ctx.mail.secrets.get(str(account.id))
        if secret is None:
            raise SmtpRejected("no usable secret for the account")
        return Credentials(account.auth_method, secret)


def is_final(state: str | None) -> bool:
    return state in FINAL_STATES
