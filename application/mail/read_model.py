"""The mail read models, as queries see them (values still sealed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class MailReadModel(Protocol):
    def accounts(
        self,
        tenant_id: str | None,
        *,
        syncable_only: bool = False,
        owner_user_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """``tenant_id`` None: every tenant (workers)."""
        ...

    def account_mark(self) -> int:
        """The latest log position at which an account's row changed (0: none yet)."""
        ...

    def accounts_changed_after(self, mark: int) -> list[dict[str, Any]]:
        """Every account (any status) whose row changed after log position ``mark``, as
        ``accounts`` has them plus ``changedAt``, oldest change first."""
        ...

    def messages(
        self,
        tenant_id: str,
        *,
        account_ids: list[str] | None,
        thread_key: str | None,
        state: str | None,
        limit: int,
        after: tuple[str, str] | None,
        unread: bool | None = None,
        flagged: bool | None = None,
        folder: str | None = None,
        direction: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def message(self, message_id: str) -> dict[str, Any] | None: ...

    def account_folders(self, account_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Per account, its synced folders ``{name, role}`` (from its folder events)."""
        ...

    def recent_mail(self, since: float) -> dict[str, float]:
        """Active accounts whose newest mail arrived at or after ``since`` (unix seconds)
        -> that time (every tenant; workers)."""
        ...

    def threads(
        self,
        tenant_id: str,
        *,
        account_ids: list[str] | None,
        limit: int,
        after: tuple[str, str] | None,
    ) -> list[dict[str, Any]]: ...
