"""Who may see and manage which mail account.

Shared accounts: every role of the tenant sees them, TenantAdmin manages them.
User accounts: the owner sees and manages them, and so does a TenantAdmin.
Another tenant's account, or another user's, answers 404 — existence never leaks.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from application.context import Context
from application.result import Result, forbidden, not_found
from application.streams import load
from application.users import KNOWN_ROLES, TENANT_ADMIN, User
from domain.mail_account import MailAccount


def can_see(user: User, tenant_id: str, scope: str, owner_user_id: str | None) -> bool:
    if user.tenant_id != tenant_id or not user.has_any(KNOWN_ROLES):
        return False
    return scope == "shared" or owner_user_id == user.id or TENANT_ADMIN in user.roles


def can_manage(user: User, scope: str, owner_user_id: str | None) -> bool:
    return TENANT_ADMIN in user.roles or (scope == "user" and owner_user_id == user.id)


def parse_account_id(raw: str) -> UUID | None:
    try:
        return UUID(raw)
    except ValueError:
        return None


def load_managed(ctx: Context, user: User, account_id: str) -> MailAccount | Result:
    """The account, if the caller may manage it; else the Result to answer."""
    stream = parse_account_id(account_id)
    if stream is None:
        return not_found(f"mail account {account_id}")
    account = load(ctx.store, MailAccount, stream)
    if not account.exists or not can_see(
        user, account.tenant_id, account.scope, account.owner_user_id
    ):
        return not_found(f"mail account {account_id}")
    if not can_manage(user, account.scope, account.owner_user_id):
        return forbidden()
    return account


def visible_account_ids(ctx: Context, user: User) -> list[str]:
    rows = ctx.mail.read_model.accounts(user.tenant_id)
    return [
        row["accountId"]
        for row in rows
        if can_see(user, row["tenantId"], row["scope"], row["ownerUserId"])
    ]


def accounts_in_scope(ctx: Context, user: User, account_id: str | None) -> list[str] | Result:
    """The accounts a listing covers: the one asked for (404 unless visible), else all
    the caller may see."""
    visible = visible_account_ids(ctx, user)
    if account_id is None:
        return visible
    if account_id not in visible:
        return not_found(f"mail account {account_id}")
    return [account_id]


def reveal(ctx: Context, token: str | None, tenant_id: str, account_id: str) -> str | None:
    """A value sealed for the account (of the tenant); None for one sealed for anyone else."""
    return None if token is None else ctx.mail.cipher.reveal(token, tenant_id, account_id)


def reveal_json(
    ctx: Context, token: str | None, tenant_id: str, account_id: str, default: Any
) -> Any:
    plain = reveal(ctx, token, tenant_id, account_id)
    return default if plain is None else json.loads(plain)
