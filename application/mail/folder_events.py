"""The account's synced folders as events (``MailFolderListed``/``Renamed``/``Gone`` on
the account's stream), so the read models learn folder names from the log and a rebuild
gives the same names. Called by the folder pass after each listing it saved.

Exactly once under racing workers and restarts: the account is loaded, compared with
the listing (``MailAccount.record_folders`` records only differences) and committed on
its version; on a conflict it is loaded and compared again. A listing lost to a crash
before this call is recorded at the next listing, since the comparison is with the
whole listing, not with the last change.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from uuid import UUID

from application.errors import ConcurrencyConflict
from application.mail.folder_state import FolderRow
from application.ports import Clock, EventStore
from application.streams import commit, load
from domain.mail_account import MailAccount

log = logging.getLogger("tidings.sync")

ATTEMPTS = 5


class FolderEvents:
    def __init__(self, store: EventStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def record(self, account_id: str, rows: Sequence[FolderRow]) -> None:
        """Record ``rows`` (every folder the account syncs now) as the account's folders."""
        listed = {row.folder_key: (row.name, role_of(row)) for row in rows}
        for _ in range(ATTEMPTS):
            account = load(self.store, MailAccount, UUID(account_id))
            if not account.exists or not account.record_folders(listed, now=self.clock.now()):
                return
            try:
                commit(self.store, account)
            except ConcurrencyConflict:
                continue  # another writer: reload and compare again
            return
        log.warning(
            "sync.folder_events_conflict account_id=%s: the next listing retries", account_id
        )


def role_of(row: FolderRow) -> str | None:
    """The folder's role as events carry it (INBOX's row keeps a setting digest there)."""
    return "inbox" if row.name == "INBOX" else row.role
