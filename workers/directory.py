"""What the supervisor knows of the accounts: refreshed from the account read model,
and corrected at once from the event store when a signal names an account."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from application.app import App
from application.streams import load
from domain.mail_account import MailAccount


@dataclass(frozen=True)
class AccountInfo:
    account_id: str
    tenant_id: str
    owner_user_id: str | None
    scope: str
    host: str


class AccountDirectory:
    def __init__(self, app: App) -> None:
        self._app = app
        self.syncable: dict[str, AccountInfo] = {}

    def refresh(self) -> None:
        rows = self._app.ctx.mail.read_model.accounts(None, syncable_only=True)
        self.syncable = {
            row["accountId"]: AccountInfo(
                row["accountId"],
                row["tenantId"],
                row["ownerUserId"],
                row["scope"],
                str(row["imap"].get("host", "")),
            )
            for row in rows
        }

    def reload(self, account_id: str) -> AccountInfo | None:
        """The account's current state from the event store (the read model may lag)."""
        try:
            account = load(self._app.ctx.store, MailAccount, UUID(account_id))
        except ValueError:
            return None
        if account.status != "active":
            self.syncable.pop(account_id, None)
            return None
        info = AccountInfo(
            account_id,
            account.tenant_id,
            account.owner_user_id,
            account.scope,
            str(account.imap.get("host", "")),
        )
        self.syncable[account_id] = info
        return info

    def of_user(self, tenant_id: str, user_id: str) -> list[str]:
        """A user's own accounts and its tenant's shared ones."""
        return [
            a.account_id
            for a in self.syncable.values()
            if a.tenant_id == tenant_id and (a.scope == "shared" or a.owner_user_id == user_id)
        ]
