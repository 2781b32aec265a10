"""Recording deferred messages (metadata first) as pages are stored: the ingestion
service's steps for them, each after the pages' events are appended and before their
cursors are saved.

- ``stored_as_v2``: a deferred message known by its version-1 fingerprint whose body came
  before (stored under version 2; a UIDVALIDITY reset brought it again) is not new.
- ``twin_rows``: the version-1 -> version-2 pairs of the pages' fingerprinted messages,
  remembered for that check.
- ``complete_found``: a deferred message that came again with its body is completed.
- ``hold_deferred``: every deferred message goes on the list of bodies to fetch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from application.context import Context
from application.mail.completion import append_second, body_fetched, still_deferred
from application.mail.deferred import DeferredBody
from application.mail.incoming import IncomingMessage
from application.mail.ports import FetchedMessage, MailboxCursor
from domain.mail_account import MailAccount
from domain.message import FINGERPRINT_V1, message_id

log = logging.getLogger("tidings.ingestion")


@dataclass(frozen=True, slots=True)
class Arrival:
    """One message of a stored page: as fetched, and as stored."""

    account: MailAccount
    cursor: MailboxCursor  # its page's
    fetched: FetchedMessage
    message: IncomingMessage

    @property
    def stream(self) -> UUID:
        return message_id(str(self.account.id), self.message.provider_message_id)

    @property
    def first_id(self) -> UUID:
        """Its id by the provider's own identity (a version-1 fingerprint, where that is it)."""
        return message_id(str(self.account.id), self.fetched.ref.provider_message_id)


def may_defer(ctx: Context, arrivals: Sequence[Arrival]) -> list[Arrival]:
    """The arrivals of accounts whose host has a download budget: only those accounts
    defer bodies, so only they need twins remembered and pages checked for bodies still
    to fetch (everyone else pays nothing for metadata first)."""
    budgets = ctx.mail.budgets
    if budgets is None:
        return []
    decided: dict[str, bool] = {}
    kept = []
    for a in arrivals:
        account_id = str(a.account.id)
        if account_id not in decided:
            host = str(a.account.imap.get("host", ""))
            decided[account_id] = budgets.meter(account_id, host) is not None
        if decided[account_id]:
            kept.append(a)
    return kept


def twin_rows(arrivals: Sequence[Arrival]) -> list[tuple[str, str, str]]:
    """(account, version-1 id, version-2 id) of the fingerprinted messages."""
    return [
        (str(a.account.id), str(a.first_id), str(a.stream))
        for a in arrivals
        if a.message.provider_message_id != a.fetched.ref.provider_message_id
    ]


def stored_as_v2(ctx: Context, arrivals: Sequence[Arrival]) -> set[UUID]:
    """The ids (version 1) of the deferred fingerprinted messages that are stored under
    their version-2 id already."""
    first_ids = {
        a.stream
        for a in arrivals
        if a.fetched.deferred and a.message.provider_message_id.startswith(FINGERPRINT_V1)
    }
    if not first_ids:
        return set()
    return {UUID(i) for i in ctx.mail.deferred.paired(str(i) for i in first_ids)}


def hold_deferred(ctx: Context, arrivals: Sequence[Arrival], aliased: set[UUID]) -> None:
    """Every deferred message goes on the list of bodies to fetch (again, with its new
    place, if it was there): after its event, before the cursor."""
    entries = [
        DeferredBody(
            str(a.account.id),
            a.account.tenant_id,
            str(a.stream),
            a.cursor.uidvalidity,
            a.fetched.uid,
            a.message.size_bytes,
            a.message.folder,
        )
        for a in arrivals
        if a.fetched.deferred and a.stream not in aliased
    ]
    ctx.mail.deferred.hold(entries)


def complete_found(
    ctx: Context, arrivals: Sequence[Arrival], twins: dict[UUID, UUID], now: datetime
) -> dict[str, int]:
    """A deferred message that came again with its body (a mailbox read again after a
    UIDVALIDITY reset, or a racing worker's page) is completed with that body; how many
    per account."""
    bodies: dict[UUID, Arrival] = {}
    for a in arrivals:
        if not a.fetched.deferred:
            for candidate in (a.stream, twins.get(a.stream)):
                if candidate is not None:
                    bodies[candidate] = a
    if not bodies:
        return {}
    held = ctx.mail.deferred.among(str(i) for i in bodies)
    if not held:
        return {}
    found = [UUID(i) for i in held]
    live = still_deferred(ctx, found)
    events = [
        body_fetched(ctx, bodies[i].account, i, bodies[i].message, now) for i in found if i in live
    ]
    done = append_second(ctx, events)
    ctx.mail.deferred.drop(held)
    per_account: dict[str, int] = {}
    for stream in done:
        account_id = str(bodies[stream].account.id)
        per_account[account_id] = per_account.get(account_id, 0) + 1
    if done:
        log.info("deferral.completed_by_page messages=%d", len(done))
    return per_account
