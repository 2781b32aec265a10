"""The poll's folder pass: new mail in every synced folder other than INBOX, each folder
with its own cursor (``mail_folders``); ``AccountSync.sync`` runs it after INBOX's pages,
on the same session.

    folders from the sync state
    -> listed again when due (no folder known, one never listed, a listing older than
       ``list_interval``, or the ``folders`` setting changed): LIST, the setting's folders
       matched to the known ones (``folders.match_listing``), saved in one write,
       then recorded as the account's folder events (``folder_events``)
    -> per synced folder but INBOX whose counters moved (``folder_seen.PollPlan``;
       all of them without LIST-STATUS), page by page after its cursor:
       read, stored (``MailIngestion``: the message's identity decides, so a message
       stored from INBOX or another folder is a duplicate, not a second
       ``MessageIngested``), then the folder's cursor saved.

Matching a listing: unchanged and renamed (same MAILBOXID) folders keep their key and
cursor (a rename carries the folder's UID map and flag cursor to the new name in the same
write); a reset (new UIDVALIDITY) keeps the key and voids the cursor; a folder gone (or
no longer chosen by the setting) loses its row, and one gone from the server marks its
UID-map rows ``FOLDER_GONE``, so the membership pass of this poll deletes the messages
found nowhere else; a new one gets a row and a first sync in the backfill window. A
listing without INBOX is not believed: nothing changes. A folder is gone from the server
only when the server says so: each one a believed listing no longer shows (under its
name or its MAILBOXID) is asked ``STATUS name (UIDVALIDITY)``; ``NO`` (it does not
exist) makes it gone, ``OK`` means the listing lied or was cut short: the folder keeps
its row and its messages their folders (logged as ``unlisted``); any other answer
raises like a sync error, before anything is saved.

Bodies past the download budget are deferred as in INBOX: the page is stored, each
deferred message held with its folder, and its body fetched later from that folder
(``completion``). A folder whose UIDVALIDITY changed between
LIST and EXAMINE is read again from the backfill window in the same pass. A folder's
failure is recorded on its row, the account is listed again at its next poll (the folder
may be gone), and the error ends the pass like any sync error.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Protocol

from application import worker_defaults as defaults
from application.context import Context
from application.mail.folder_listing import Folder, FolderListing
from application.mail.folder_state import FolderRow, FolderStateStore, folder_key
from application.mail.folders import (
    FolderChanges,
    FolderSelection,
    FolderSettingInvalid,
    KnownFolder,
    folders_to_sync,
    match_listing,
    parse_folder_setting,
)
from application.mail.ingestion import Page, PageStored
from application.mail.ports import (
    FetchBatch,
    FolderSession,
    MailboxCursorInvalid,
    MailboxSession,
)
from application.mail.state import ErrorKind
from application.mail.sync_outcome import SYNC_ERRORS, error_kind
from domain.mail_account import MailAccount

log = logging.getLogger("tidings.sync")


@dataclass(frozen=True)
class FolderSyncSettings:
    list_interval: float = defaults.FOLDER_LIST_INTERVAL
    backfill_window_days: int = defaults.BACKFILL_WINDOW_DAYS
    max_messages_per_poll: int = defaults.MAX_MESSAGES_PER_POLL


class PageStore(Protocol):
    """What the pass needs of ``MailIngestion``."""

    def read_page(self, account: MailAccount, batch: FetchBatch) -> Page: ...

    def store(self, pages: Sequence[Page]) -> list[PageStored]: ...


@dataclass(frozen=True)
class FolderPass:
    ingested: int = 0
    duplicates: int = 0
    folders: int = 0  # folders paged (INBOX not counted)
    listed: bool = False  # listed again: the account's folder events may have changed
    waiting: tuple[str, ...] = ()  # folders left with pages for a later poll
    fresh: tuple[str, ...] = ()  # folders read from no cursor (new, or reset)


class FolderSync:
    """Thread-safe (no state of its own): the poll's pool threads share one."""

    def __init__(
        self,
        ctx: Context,
        ingestion: PageStore,
        store: FolderStateStore,
        settings: FolderSyncSettings,
        today: Callable[[], date] = date.today,
        *,
        on_listed: Callable[[str, Sequence[FolderRow]], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.ingestion = ingestion
        self.store = store
        self.settings = settings
        self.today = today
        self.on_listed = on_listed  # the folders as events (``FolderEvents.record``)

    def run(
        self,
        session: MailboxSession | FolderSession,
        account: MailAccount,
        check: Callable[[], None],
        unopened: Callable[[str], bool] = lambda name: False,
    ) -> FolderPass:
        """The folder pass on ``session`` (nothing for a session without folders);
        ``check`` raises when the poll's deadline passed; a folder ``unopened`` says
        nothing came to is not read (``folder_seen.PollPlan``)."""
        if not isinstance(session, FolderSession):
            return FolderPass()
        account_id, now = str(account.id), self.ctx.clock.now()
        rows = self.store.folders(account_id)
        listed = self._due(rows, now, selection_of(account))
        if listed:
            listing = session.list_folders()
            rows = self.relist(account, rows, listing, now, confirm=session.folder_exists)
        done = FolderPass(listed=listed)
        # Sent first: a message paged there is outbound, and on Gmail it is in All Mail too.
        for row in sorted(rows, key=lambda r: (r.name != "INBOX", r.role != "sent", r.name)):
            if row.name == "INBOX" or (row.cursor is not None and unopened(row.name)):
                continue
            check()
            try:
                ingested, duplicates, whole = self._folder(session, account, row, check)
            except SYNC_ERRORS as error:
                self._failed(row, error_kind(error))
                raise
            waiting = done.waiting if whole else (*done.waiting, row.name)
            fresh = done.fresh if row.cursor is not None else (*done.fresh, row.name)
            done = FolderPass(
                done.ingested + ingested,
                done.duplicates + duplicates,
                done.folders + 1,
                listed,
                waiting,
                fresh,
            )
        return done

    def _due(self, rows: Sequence[FolderRow], now: datetime, selection: FolderSelection) -> bool:
        if not rows or any(row.listed_at is None for row in rows):
            return True
        oldest = min(row.listed_at for row in rows if row.listed_at is not None)
        inbox = next((row for row in rows if row.name == "INBOX"), None)
        changed = inbox is None or inbox.role != _marker(selection)
        return changed or now - oldest >= timedelta(seconds=self.settings.list_interval)

    def relist(
        self,
        account: MailAccount,
        rows: Sequence[FolderRow],
        listing: FolderListing,
        now: datetime,
        *,
        confirm: Callable[[str], bool],
    ) -> list[FolderRow]:
        """The folders the account syncs now, matched to ``rows`` and saved; a folder the
        listing no longer shows is gone only when ``confirm`` (the session's
        ``folder_exists``, one bounded STATUS each) says the server has it no more."""
        account_id, selection = str(account.id), selection_of(account)
        chosen = folders_to_sync(listing.folders, selection)
        by_known = {KnownFolder(r.name, r.uidvalidity, r.mailbox_id): r for r in rows}
        changes = match_listing(list(by_known), chosen.folders)
        if changes.suspect:
            log.warning("sync.folders_suspect account_id=%s: listing without INBOX", account_id)
            return list(rows)
        lost = vanished(changes, listing)
        unlisted = {name for name in lost if confirm(name)}  # the listing left them out
        if unlisted:
            log.warning(
                "sync.folders_unlisted account_id=%s kept=%d: listed no more, still there",
                account_id,
                len(unlisted),
            )
        kept = _matched(account_id, changes, by_known, selection)
        kept += [by_known[k] for k in changes.gone if k.name in unlisted]
        gone = [by_known[k].folder_key for k in changes.gone if k.name not in unlisted]
        renamed = {k.name: f.name for k, f in changes.renamed if k.name != f.name}
        self.store.save_listing(
            account_id,
            kept,
            gone,
            now,
            renamed=renamed,
            vanished=[name for name in lost if name not in unlisted],
        )
        if self.on_listed is not None:
            self.on_listed(account_id, kept)
        log.info(
            "sync.folders_listed account_id=%s synced=%d added=%d renamed=%d reset=%d gone=%d"
            " unlisted=%d missing=%d dropped=%d",
            account_id,
            len(kept),
            len(changes.added),
            len(changes.renamed),
            len(changes.reset),
            len(gone),
            len(unlisted),
            len(chosen.missing),
            sum(n for _, n in listing.dropped),
        )
        return sorted(kept, key=lambda r: (r.name != "INBOX", r.name))

    def _folder(
        self,
        session: FolderSession,
        account: MailAccount,
        row: FolderRow,
        check: Callable[[], None],
    ) -> tuple[int, int, bool]:
        """Pages of one folder until the server has no more: (ingested, duplicates,
        whether it was read to its end)."""
        since = self.today() - timedelta(days=self.settings.backfill_window_days)
        limit = self.settings.max_messages_per_poll
        cursor, ingested, duplicates = row.cursor, 0, 0
        while True:
            check()
            try:
                batch = session.fetch_folder(row.name, cursor, backfill_since=since, limit=limit)
            except MailboxCursorInvalid:
                log.warning("sync.folder_reset account_id=%s", row.account_id)
                cursor = None
                self.store.save_cursor(row.account_id, row.folder_key, None, self.ctx.clock.now())
                batch = session.fetch_folder(row.name, None, backfill_since=since, limit=limit)
            page = replace(
                self.ingestion.read_page(account, batch),
                folder=row.name,
                folder_key=row.folder_key,
                sent_folder=row.role == "sent",
            )
            [result] = self.ingestion.store([page])
            if result.erased:
                return ingested, duplicates, False
            ingested, duplicates = ingested + result.ingested, duplicates + result.duplicates
            cursor = page.cursor
            self.store.save_cursor(row.account_id, row.folder_key, cursor, self.ctx.clock.now())
            if not page.has_more:
                return ingested, duplicates, True

    def _failed(self, row: FolderRow, kind: ErrorKind) -> None:
        now = self.ctx.clock.now()
        self.store.record_failure(row.account_id, row.folder_key, kind, now)
        self.store.relist_soon(row.account_id)


def selection_of(account: MailAccount) -> FolderSelection:
    """The account's ``folders`` setting (the handlers checked it; a value that does not
    parse reads as the default)."""
    try:
        return parse_folder_setting(account.folders)
    except FolderSettingInvalid:
        return parse_folder_setting(None)


def vanished(changes: FolderChanges, listing: FolderListing) -> list[str]:
    """The names of the folders gone from the server: no longer listed (selectable) under
    their name or their MAILBOXID. A folder the setting no longer chooses is not one."""
    names = {f.name for f in listing.folders if f.selectable}
    ids = {f.mailbox_id for f in listing.folders if f.selectable and f.mailbox_id}
    return [
        k.name
        for k in changes.gone
        if k.name not in names and (k.mailbox_id is None or k.mailbox_id not in ids)
    ]


def _marker(selection: FolderSelection) -> str:
    """INBOX's role column remembers the setting it was listed under (a digest), so a
    changed setting lists the folders again at the next poll."""
    text = "\x00".join((selection.mode, *selection.names))
    return "inbox:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _matched(
    account_id: str,
    changes: FolderChanges,
    by_known: dict[KnownFolder, FolderRow],
    selection: FolderSelection,
) -> list[FolderRow]:
    """The rows the account keeps: known ones updated from the listing, new ones made."""
    rows: list[FolderRow] = []
    for known, folder in (*changes.unchanged, *changes.renamed):
        rows.append(_listed(by_known[known], folder, selection))
    for known, folder in changes.reset:
        rows.append(replace(_listed(by_known[known], folder, selection), cursor=None))
    for folder in changes.added:
        key = folder_key(account_id, folder.mailbox_id, folder.name)
        new = FolderRow(account_id, key, folder.name)
        rows.append(_listed(new, folder, selection))
    return rows


def _listed(row: FolderRow, folder: Folder, selection: FolderSelection) -> FolderRow:
    role = _marker(selection) if folder.name == "INBOX" else folder.role
    validity = folder.status.uidvalidity if folder.status else None
    return replace(
        row,
        name=folder.name,
        role=role,
        mailbox_id=folder.mailbox_id,
        uidvalidity=validity if validity is not None else row.uidvalidity,
    )
