"""What the supervisor knows of accounts, as values the directory reader, the shared tier
state and the news hand over: a leaf (it imports nothing of ``workers``), so those
modules share these values without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AccountInfo:
    """A syncable account as the directory knows it."""

    account_id: str
    tenant_id: str
    owner_user_id: str | None
    scope: str
    host: str


@dataclass(frozen=True)
class SharedActivity:
    """Per account (unix seconds): the last activity of a user who promotes it, and the
    arrival of its newest recent mail; accounts without either are absent."""

    user_active: dict[str, float] = field(default_factory=dict)
    mail: dict[str, float] = field(default_factory=dict)
