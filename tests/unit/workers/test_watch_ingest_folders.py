"""The watch path's asking for pushed folders (``WatchIngest.watch_folders``) with fakes:
the folder state is read only where the server offers NOTIFY, an unreachable store
leaves the folders to the poll without ending the watch, and the news of changed
folders reaches the supervisor's inbox."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from application.errors import StoreUnavailable
from application.mail.folder_state import FolderRow
from workers.metrics import WorkerMetrics
from workers.news import FoldersChanged, News
from workers.watch_ingest import WatchIngest

UNUSED: Any = None  # the sync and its committer: not touched by these calls


class Session:
    def __init__(self, capabilities: frozenset[str]) -> None:
        self.capabilities = capabilities
        self.asked: list[list[str]] = []

    def notify_folders(self, folders: Sequence[str]) -> bool:
        self.asked.append(list(folders))
        return True


class Folders:
    def __init__(self, names: list[str], *, reachable: bool = True) -> None:
        self.names = names
        self.reachable = reachable
        self.reads = 0

    def folders(self, account_id: str) -> list[FolderRow]:
        self.reads += 1
        if not self.reachable:
            raise StoreUnavailable("the database is away")
        return [FolderRow(account_id, name, name) for name in self.names]


def ingest(folders: Folders, told: list[News]) -> WatchIngest:
    return WatchIngest(UNUSED, UNUSED, WorkerMetrics(), told.append, folders=folders)  # type: ignore[arg-type]


def test_the_synced_folders_but_inbox_are_asked_for_where_notify_is_offered() -> None:
    folders, session = Folders(["INBOX", "Sent", "Archive"]), Session(frozenset({"NOTIFY"}))
    ingest(folders, []).watch_folders("a", session)  # type: ignore[arg-type]
    assert session.asked == [["Sent", "Archive"]]


def test_without_notify_the_folder_state_is_not_even_read() -> None:
    folders, session = Folders(["INBOX", "Sent"]), Session(frozenset({"IDLE"}))
    ingest(folders, []).watch_folders("a", session)  # type: ignore[arg-type]
    assert (folders.reads, session.asked) == (0, [])


def test_an_unreachable_folder_state_leaves_the_folders_to_the_poll() -> None:
    folders, session = Folders(["Sent"], reachable=False), Session(frozenset({"NOTIFY"}))
    ingest(folders, []).watch_folders("a", session)  # type: ignore[arg-type]
    assert (folders.reads, session.asked) == (1, [])


def test_news_of_changed_folders_is_told_to_the_supervisor() -> None:
    told: list[News] = []
    ingest(Folders([]), told).on_folders_changed("a")
    assert told == [FoldersChanged("a")]
