"""The folder pass's decisions (``FolderSync``) with fakes of its ports: when it lists,
how a listing maps onto the known folders' keys and cursors, a listing not believed, a
failed folder, a page past the download budget stored deferred."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from application.mail.folder_listing import Folder, FolderListing, FolderStatus
from application.mail.folder_state import FolderRow, folder_key
from application.mail.folder_sync import FolderSync, FolderSyncSettings
from application.mail.ingestion import Page
from application.mail.ports import (
    FetchBatch,
    FetchedMessage,
    MailboxCursor,
    MailboxTransientError,
    MessageRef,
)
from application.mail.state import ErrorKind
from domain.mail_account import MailAccount

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


class MemoryFolders:
    """``FolderStateStore`` in memory."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], FolderRow] = {}
        self.failures: list[tuple[str, str]] = []
        self.renamed: dict[str, str] = {}
        self.vanished: list[str] = []

    def folders(self, account_id: str) -> list[FolderRow]:
        rows = [r for (a, _), r in self.rows.items() if a == account_id]
        return sorted(rows, key=lambda r: (r.name != "INBOX", r.name))

    def save_listing(
        self,
        account_id: str,
        rows: Sequence[FolderRow],
        gone: Iterable[str],
        at: datetime,
        *,
        renamed: Mapping[str, str] | None = None,
        vanished: Iterable[str] = (),
    ) -> None:
        self.renamed.update(renamed or {})
        self.vanished += list(vanished)
        for key in gone:
            self.rows.pop((account_id, key), None)
        for row in rows:
            old = self.rows.get((account_id, row.folder_key))
            synced = old.last_sync_at if old else None
            self.rows[(account_id, row.folder_key)] = dataclasses.replace(
                row, listed_at=at, last_sync_at=synced
            )

    def save_cursor(
        self, account_id: str, key: str, cursor: MailboxCursor | None, at: datetime
    ) -> None:
        row = self.rows[(account_id, key)]
        self.rows[(account_id, key)] = dataclasses.replace(row, cursor=cursor, last_sync_at=at)

    def record_failure(self, account_id: str, key: str, kind: ErrorKind, at: datetime) -> None:
        self.failures.append((key, str(kind)))

    def relist_soon(self, account_id: str) -> None:
        for (a, k), row in list(self.rows.items()):
            if a == account_id:
                self.rows[(a, k)] = dataclasses.replace(row, listed_at=None)

    def health(self, account_ids: Iterable[str]) -> dict[str, list[FolderRow]]:
        return {a: self.folders(a) for a in account_ids}

    def forget(self, account_id: str) -> None:
        self.rows = {k: r for k, r in self.rows.items() if k[0] != account_id}


def folder(
    name: str, role: Any = None, *, validity: int = 1, mailbox_id: str | None = None
) -> Folder:
    return Folder(
        name,
        "/",
        role=role,
        mailbox_id=mailbox_id,
        status=FolderStatus(uidvalidity=validity),
    )


class FakeSession:
    """A ``FolderSession``: a listing, and pages per folder (empty unless given)."""

    def __init__(self, listing: Sequence[Folder]) -> None:
        self.listing = FolderListing(tuple(listing))
        self.lists = 0
        self.fetched: list[tuple[str, MailboxCursor | None]] = []
        self.pages: dict[str, FetchBatch] = {}
        self.failing: set[str] = set()
        self.unlisted: set[str] = set()  # left out of the listing, still on the server
        self.probed: list[str] = []

    def folder_exists(self, name: str) -> bool:
        self.probed.append(name)
        return name in self.unlisted

    def list_folders(self) -> FolderListing:
        self.lists += 1
        return self.listing

    def fetch_folder(
        self, name: str, cursor: MailboxCursor | None, *, backfill_since: date, limit: int
    ) -> FetchBatch:
        self.fetched.append((name, cursor))
        if name in self.failing:
            raise MailboxTransientError("the folder went away")
        return self.pages.get(name, FetchBatch((), MailboxCursor(1, 5), has_more=False))


class RecordingIngestion:
    def __init__(self) -> None:
        self.stored: list[Any] = []

    def read_page(self, account: MailAccount, batch: FetchBatch) -> Page:
        return Page(account, [], batch.new_cursor, batch.has_more)

    def store(self, pages: Sequence[Any]) -> list[Any]:
        self.stored += pages
        return [SimpleNamespace(erased=False, ingested=0, duplicates=0) for _ in pages]


def make(
    listing: Sequence[Folder],
    folders: str | list[str] = "special",
    interval: float = 900,
    on_listed: Callable[[str, Sequence[FolderRow]], None] | None = None,
) -> tuple[FolderSync, MemoryFolders, FakeSession, MailAccount, RecordingIngestion]:
    store, session, ingestion = MemoryFolders(), FakeSession(listing), RecordingIngestion()
    clock = SimpleNamespace(now=lambda: NOW)
    ctx: Any = SimpleNamespace(clock=clock)
    account = MailAccount(uuid.uuid4())
    account.folders = folders
    sync = FolderSync(
        ctx,
        ingestion,
        store,
        FolderSyncSettings(list_interval=interval),
        today=NOW.date,
        on_listed=on_listed,
    )
    return sync, store, session, account, ingestion


def never_late() -> None:
    return None


SPECIAL = [folder("INBOX", "inbox"), folder("Sent", "sent"), folder("Archive", "archive")]


def test_a_first_pass_lists_and_pages_every_synced_folder_but_inbox() -> None:
    sync, store, session, account, _ = make([*SPECIAL, folder("Projects")])
    sync.run(session, account, never_late)
    assert session.lists == 1
    # Sent first: its pages are outbound (and on Gmail its messages are in All Mail too).
    assert [name for name, _ in session.fetched] == ["Sent", "Archive"]
    assert {r.name for r in store.folders(str(account.id))} == {"INBOX", "Sent", "Archive"}
    sent = next(r for r in store.folders(str(account.id)) if r.name == "Sent")
    assert sent.cursor == MailboxCursor(1, 5) and sent.last_sync_at == NOW


def test_within_the_interval_it_does_not_list_again_and_pages_from_the_cursor() -> None:
    sync, _, session, account, _ = make(SPECIAL)
    sync.run(session, account, never_late)
    session.fetched.clear()
    sync.run(session, account, never_late)
    assert session.lists == 1
    assert session.fetched == [("Sent", MailboxCursor(1, 5)), ("Archive", MailboxCursor(1, 5))]


def test_a_changed_setting_lists_again_at_once() -> None:
    sync, store, session, account, _ = make([*SPECIAL, folder("Clients")])
    sync.run(session, account, never_late)
    account.folders = ["Clients"]
    sync.run(session, account, never_late)
    assert session.lists == 2
    assert {r.name for r in store.folders(str(account.id))} == {"INBOX", "Clients"}


def test_matching_keeps_keys_voids_a_reset_cursor_and_drops_what_is_gone() -> None:
    listing = [
        folder("INBOX", "inbox"),
        folder("Sent", "sent", mailbox_id="M-sent"),
        folder("Archive", "archive", validity=1),
        folder("Trash", "trash"),
    ]
    sync, store, session, account, _ = make(listing, interval=0)
    sync.run(session, account, never_late)
    before = {r.name: r for r in store.folders(str(account.id))}
    assert before["Sent"].folder_key == folder_key(str(account.id), "M-sent")
    session.listing = FolderListing(
        (
            folder("INBOX", "inbox"),
            folder("Sent Items", "sent", mailbox_id="M-sent"),  # renamed, same MAILBOXID
            folder("Archive", "archive", validity=2),  # reset
        )
    )
    session.fetched.clear()
    sync.run(session, account, never_late)
    after = {r.name: r for r in store.folders(str(account.id))}
    assert set(after) == {"INBOX", "Sent Items", "Archive"}  # Trash gone
    assert after["Sent Items"].folder_key == before["Sent"].folder_key
    assert after["Archive"].folder_key == before["Archive"].folder_key
    fetched = dict(session.fetched)
    assert fetched["Sent Items"] == MailboxCursor(1, 5)  # the renamed folder goes on
    assert fetched["Archive"] is None  # the reset one starts again
    # The rename carries the UID map to the new name; Trash is gone from the server.
    assert (store.renamed, store.vanished) == ({"Sent": "Sent Items"}, ["Trash"])


def test_a_folder_the_listing_left_out_but_the_server_has_is_kept() -> None:
    sync, store, session, account, _ = make(SPECIAL, interval=0)
    sync.run(session, account, never_late)
    keys = {r.name: r.folder_key for r in store.folders(str(account.id))}
    session.listing = FolderListing((folder("INBOX", "inbox"), folder("Archive", "archive")))
    session.unlisted = {"Sent"}  # LIST lied: STATUS Sent answers OK
    session.fetched.clear()
    sync.run(session, account, never_late)
    after = {r.name: r.folder_key for r in store.folders(str(account.id))}
    assert after == keys and store.vanished == [] and session.probed == ["Sent"]
    assert "Sent" in dict(session.fetched)  # still synced from its cursor
    session.unlisted = set()  # now really deleted: STATUS answers NO
    sync.run(session, account, never_late)
    assert set(after) - {r.name for r in store.folders(str(account.id))} == {"Sent"}
    assert store.vanished == ["Sent"]


def test_a_failed_confirmation_decides_nothing() -> None:
    sync, store, session, account, _ = make(SPECIAL, interval=0)
    sync.run(session, account, never_late)
    rows = store.folders(str(account.id))

    def broken(name: str) -> bool:
        raise MailboxTransientError("STATUS answered BAD")

    session.folder_exists = broken  # type: ignore[method-assign]
    session.listing = FolderListing((folder("INBOX", "inbox"),))
    with pytest.raises(MailboxTransientError):
        sync.run(session, account, never_late)
    assert store.folders(str(account.id)) == rows and store.vanished == []


def test_a_folder_no_longer_chosen_is_not_gone_from_the_server() -> None:
    listing = [*SPECIAL, folder("Projects")]
    sync, store, session, account, _ = make(listing, interval=0)
    sync.run(session, account, never_late)
    account.folders = ["Projects"]  # the setting changed: Sent and Archive not chosen
    sync.run(session, account, never_late)
    assert {r.name for r in store.folders(str(account.id))} == {"INBOX", "Projects"}
    assert store.vanished == []  # still on the server: their messages stay placed


def test_each_saved_listing_is_handed_on_to_be_recorded_as_events() -> None:
    recorded: list[tuple[str, list[str]]] = []

    def record(account_id: str, rows: Sequence[FolderRow]) -> None:
        recorded.append((account_id, sorted(r.name for r in rows)))

    sync, _, session, account, _ = make(SPECIAL, interval=0, on_listed=record)
    sync.run(session, account, never_late)
    session.listing = FolderListing((folder("Sent", "sent"),))  # not believed: not handed on
    sync.run(session, account, never_late)
    assert recorded == [(str(account.id), ["Archive", "INBOX", "Sent"])]


def test_a_listing_without_inbox_is_not_believed() -> None:
    sync, store, session, account, _ = make(SPECIAL, interval=0)
    sync.run(session, account, never_late)
    session.listing = FolderListing((folder("Sent", "sent"),))
    sync.run(session, account, never_late)
    assert {r.name for r in store.folders(str(account.id))} == {"INBOX", "Sent", "Archive"}


def test_a_failing_folder_is_recorded_and_the_account_listed_again() -> None:
    sync, store, session, account, _ = make(SPECIAL)
    session.failing.add("Archive")
    with pytest.raises(MailboxTransientError):
        sync.run(session, account, never_late)
    archive = next(r for r in store.folders(str(account.id)) if r.name == "Archive")
    assert store.failures == [(archive.folder_key, "transient")]
    assert all(r.listed_at is None for r in store.folders(str(account.id)))


def test_a_page_past_the_download_budget_is_stored_deferred_and_the_cursor_moves() -> None:
    sync, store, session, account, ingestion = make(
        [folder("INBOX", "inbox"), folder("Sent", "sent")]
    )
    ref = MessageRef(7, "fp:x", 100, NOW - timedelta(days=1))
    session.pages["Sent"] = FetchBatch(
        (FetchedMessage(ref, deferred=True, header=b"Subject: x\r\n\r\n"),),
        MailboxCursor(1, 7),
        has_more=False,
    )
    sync.run(session, account, never_late)
    # Stored like an INBOX page: its deferred message is held with its folder (the
    # ingestion does that), and its body comes later from Sent (``completion``).
    [page] = ingestion.stored
    assert (page.folder, page.cursor) == ("Sent", MailboxCursor(1, 7))
    sent = next(r for r in store.folders(str(account.id)) if r.name == "Sent")
    assert sent.cursor == MailboxCursor(1, 7)
