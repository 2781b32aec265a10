"""What a login reads before it connects (the account, its secret, its mailbox cursor),
for many logins at once: a worker taking over hundreds of accounts (a fleet join, a
failover) reads them in three statements a batch instead of three a login, where the
logins' reads queued for the worker's database connections."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from uuid import UUID

from application.context import Context
from application.errors import UnreadableEvent
from application.mail.ports import MailboxCursor
from application.streams import replay
from domain.mail_account import MailAccount


@dataclass(frozen=True)
class LoginReads:
    account: MailAccount
    secret: str | None
    cursor: MailboxCursor | None


def read_logins(ctx: Context, account_ids: Collection[str]) -> dict[str, LoginReads]:
    """The active accounts among ``account_ids``, each with its secret and cursor (raises
    what the stores raise; an unreadable account is left to its own login's read)."""
    streams = ctx.store.load_many(UUID(a) for a in account_ids)
    accounts: dict[str, MailAccount] = {}
    for stream_id, events in streams.items():
        if not events:
            continue
        try:
            account = replay(MailAccount, stream_id, events)
        except UnreadableEvent:
            continue
        if account.status == "active":
            accounts[str(stream_id)] = account
    secrets = ctx.mail.secrets.get_many(accounts)
    cursors = ctx.mail.state.cursors(accounts)
    return {
        a: LoginReads(account, secrets.get(a), cursors.get(a)) for a, account in accounts.items()
    }
