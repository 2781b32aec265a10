"""The membership pass's decisions (``MembershipPass``) with fakes of its ports: a move,
a copy, a deletion only when gone from every folder, a folder whose answer is not
believed, a hostile server that answers "every UID vanished" every time, a folder list
that changes every poll, a deferred message held, a deleted message that stays deleted,
a collision reloaded and compared again, a busy claim."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from application.mail.flag_state import UidEntry
from application.mail.folder_state import FOLDER_GONE
from application.mail.gmail_labels import FolderLabels
from application.mail.membership import FolderUids, MembershipPass, placement_event
from application.mail.resync import UidRanges, Vanished
from domain.events import DomainEvent
from domain.mail_account import MailAccount
from domain.message import (
    MessageDeleted,
    MessageFoldersChanged,
    MessageIngested,
    MessageRestored,
    MessageState,
    state_before_deletion,
    stored_folders,
)
from domain.message_retention import MessageExpired
from tests.unit.application.fakes import FakeEventStore

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


class MemoryMap:
    """``UidMap`` in memory, with the flag claims' rule."""

    def __init__(self, entries: Sequence[UidEntry] = ()) -> None:
        self.entries = list(entries)
        self.claimed: str | None = None

    def mapped(self, account_id: str) -> list[UidEntry]:
        return [e for e in self.entries if e.account_id == account_id]

    def drop(self, entries: Sequence[UidEntry]) -> None:
        gone = {(e.account_id, e.folder, e.uid) for e in entries}
        self.entries = [e for e in self.entries if (e.account_id, e.folder, e.uid) not in gone]

    def claim(self, account_id: str, folder: str, token: str, *, now: float, until: float) -> bool:
        if self.claimed is None:
            self.claimed = token
        return self.claimed == token

    def release(self, account_id: str, folder: str, token: str) -> None:
        if self.claimed == token:
            self.claimed = None


class FakeServer:
    """A ``MembershipReader``: each folder's UIDs (None: not believed), counted."""

    def __init__(self, folders: dict[str, set[int] | None], uidvalidity: int = 7) -> None:
        self.folders = folders
        self.uidvalidity = uidvalidity
        self.reads: list[str] = []

    def folder_uids(self, folder: str) -> FolderUids:
        self.reads.append(folder)
        uids = self.folders.get(folder, set())
        return FolderUids(self.uidvalidity, None if uids is None else frozenset(uids))


def ingested(
    account: MailAccount, folder: str = "INBOX", state: MessageState = "ok"
) -> MessageIngested:
    return MessageIngested(
        originator_id=uuid.uuid4(),
        originator_version=1,
        timestamp=NOW,
        tenant_id=account.tenant_id,
        account_id=str(account.id),
        provider_message_id="p",
        thread_key="t",
        message_id_header="",
        references="",
        sender="",
        to="",
        cc="",
        subject="",
        snippet="",
        received_at=NOW.isoformat(),
        body_ref=None,
        size_bytes=1,
        folder=folder,
        state=state,
        defects=[],
        extra={},
    )


def setup(
    *arrivals: tuple[str, int, str],
) -> tuple[MembershipPass, FakeEventStore, MemoryMap, MailAccount, list[uuid.UUID]]:
    """Messages stored from (name, uid, folder) arrivals, each mapped at that UID."""
    account = MailAccount(uuid.uuid4())
    account.tenant_id = "t1"
    store = FakeEventStore()
    ids: dict[str, uuid.UUID] = {}
    entries: list[UidEntry] = []
    for name, uid, folder in arrivals:
        if name not in ids:
            event = ingested(account, folder)
            store.append([event])
            ids[name] = event.originator_id
        entries.append(UidEntry(str(account.id), folder, 7, uid, ids[name], None))
    ctx: Any = SimpleNamespace(store=store, clock=SimpleNamespace(now=lambda: NOW))
    uid_map = MemoryMap(entries)
    return MembershipPass(ctx, uid_map), store, uid_map, account, list(ids.values())


def noop() -> None:
    return None


def events_of(store: FakeEventStore, kind: type[DomainEvent]) -> list[Any]:
    return [e for e in store.events if isinstance(e, kind)]


def test_a_message_found_in_archive_and_gone_from_inbox_moves() -> None:
    membership, store, uid_map, account, _ = setup(("m", 1, "INBOX"), ("m", 4, "Archive"))
    server = FakeServer({"INBOX": set(), "Archive": {4}})
    placed = membership.run(server, account, ["INBOX", "Archive"], noop)
    assert (placed.moved, placed.deleted, placed.expunged) == (1, 0, 1)
    [moved] = events_of(store, MessageFoldersChanged)
    assert (moved.folders, moved.added, moved.removed) == (["Archive"], ["Archive"], ["INBOX"])
    assert [(e.folder, e.uid) for e in uid_map.entries] == [("Archive", 4)]
    assert membership.run(server, account, ["INBOX", "Archive"], noop).moved == 0


def test_a_copy_is_in_both_folders_and_deleted_only_when_gone_from_both() -> None:
    membership, store, _, account, [m] = setup(("m", 1, "INBOX"), ("m", 4, "Archive"))
    both = FakeServer({"INBOX": {1}, "Archive": {4}})
    assert membership.run(both, account, ["INBOX", "Archive"], noop).moved == 1
    assert stored_folders(store.load(m)) == ("Archive", "INBOX")
    archive_only = FakeServer({"INBOX": set(), "Archive": {4}})
    assert membership.run(archive_only, account, ["INBOX", "Archive"], noop).moved == 1
    none = FakeServer({"INBOX": set(), "Archive": set()})
    assert membership.run(none, account, ["INBOX", "Archive"], noop).deleted == 1
    assert events_of(store, MessageDeleted)[0].reason == "expunged"
    assert stored_folders(store.load(m)) == ()
    assert membership.run(none, account, ["INBOX", "Archive"], noop) == membership.run(
        none, account, ["INBOX", "Archive"], noop
    )
    assert len(events_of(store, MessageDeleted)) == 1


def test_an_answer_not_believed_deletes_nothing_every_time() -> None:
    membership, store, uid_map, account, _ = setup(("a", 1, "INBOX"), ("b", 2, "INBOX"))
    hostile = FakeServer({"INBOX": None})  # "every UID vanished", against its own EXISTS
    for _ in range(3):
        placed = membership.run(hostile, account, ["INBOX"], noop)
        assert (placed.deleted, placed.expunged, placed.unbelieved) == (0, 0, 1)
    assert store.events == events_of(store, MessageIngested) and len(uid_map.entries) == 2


def test_a_folder_list_that_changes_every_poll_deletes_nothing() -> None:
    membership, store, _, account, _ = setup(("a", 1, "INBOX"), ("b", 3, "Archive"))
    server = FakeServer({"INBOX": {1}, "Archive": {3}})
    for folders in (["INBOX"], ["Archive"], ["INBOX", "Archive"], ["Archive"], ["INBOX"]):
        membership.run(server, account, folders, noop)
    assert events_of(store, MessageDeleted) == [] and events_of(store, MessageFoldersChanged) == []


def test_rows_of_a_folder_gone_from_the_server_stop_placing_their_messages_once() -> None:
    # The folder pass marks the rows of a folder a believed listing found gone from the
    # server (``FOLDER_GONE``): a message only there is deleted, a copy elsewhere moves,
    # and the rows leave the map (a second pass finds nothing to do).
    membership, store, uid_map, account, [a, b] = setup(
        ("a", 4, "Archive"), ("b", 3, "Archive"), ("a", 1, "INBOX")
    )
    uid_map.entries = [
        dataclasses.replace(e, uidvalidity=FOLDER_GONE) if e.folder == "Archive" else e
        for e in uid_map.entries
    ]
    server = FakeServer({"INBOX": {1}})
    placed = membership.run(server, account, ["INBOX"], noop)
    assert (placed.moved, placed.deleted, placed.expunged) == (1, 1, 2)
    assert [e.originator_id for e in events_of(store, MessageDeleted)] == [b]
    [moved] = events_of(store, MessageFoldersChanged)
    assert (moved.originator_id, moved.folders) == (a, ["INBOX"])
    assert {e.folder for e in uid_map.entries} == {"INBOX"}
    placed = membership.run(server, account, ["INBOX"], noop)
    assert (placed.moved, placed.deleted, placed.expunged) == (0, 0, 0)


def test_an_older_uidvalidity_row_still_places_its_message() -> None:
    membership, store, uid_map, account, _ = setup(("a", 1, "Archive"))
    reset = FakeServer({"Archive": set()}, uidvalidity=8)
    placed = membership.run(reset, account, ["INBOX", "Archive"], noop)
    assert (placed.deleted, placed.expunged) == (0, 0)
    assert len(uid_map.entries) == 1 and events_of(store, MessageDeleted) == []


def test_a_deferred_message_is_held_and_a_deleted_one_comes_back_unless_expired() -> None:
    account = MailAccount(uuid.uuid4())
    deferred: list[DomainEvent] = [ingested(account, state="deferred")]
    assert placement_event(account, uuid.uuid4(), deferred, set(), NOW) is not None  # pure
    membership, store, _, account, [m] = setup(("m", 1, "INBOX"))
    store.streams[m] = [ingested(account, state="deferred")]
    placed = membership.run(FakeServer({"INBOX": set()}), account, ["INBOX"], noop)
    assert (placed.deleted, placed.held) == (0, 1)
    gone: list[DomainEvent] = [
        ingested(account),
        MessageDeleted(
            originator_id=m,
            originator_version=2,
            timestamp=NOW,
            tenant_id="t1",
            account_id=str(account.id),
            reason="expunged",
        ),
    ]
    back = placement_event(account, m, gone, {"Archive", "INBOX"}, NOW)
    assert isinstance(back, MessageRestored) and back.originator_version == 3
    assert (back.folders, back.state) == (["Archive", "INBOX"], "ok")
    assert placement_event(account, m, gone, set(), NOW) is None  # still nowhere
    expired = MessageExpired(
        originator_id=m,
        originator_version=3,
        timestamp=NOW,
        tenant_id="t1",
        account_id=str(account.id),
        body_ref=None,
        keep_for="P30D",
    )
    assert placement_event(account, m, [*gone, expired], {"Archive"}, NOW) is None
    assert stored_folders([*gone, back]) == ("Archive", "INBOX")
    late: list[DomainEvent] = [ingested(account, state="deferred"), *gone[1:]]
    assert state_before_deletion(late) == "deferred"


def test_a_collision_reloads_and_compares_again() -> None:
    membership, store, _, account, _ = setup(("m", 1, "INBOX"), ("m", 4, "Archive"))
    store.conflicts_to_raise = 1
    placed = membership.run(FakeServer({"INBOX": set(), "Archive": {4}}), account, [], noop)
    assert placed.moved == 0  # no folder read: nothing decided
    placed = membership.run(
        FakeServer({"INBOX": set(), "Archive": {4}}), account, ["INBOX", "Archive"], noop
    )
    assert placed.moved == 1 and len(events_of(store, MessageFoldersChanged)) == 1


def test_a_pass_already_running_for_the_account_is_left_alone() -> None:
    membership, store, uid_map, account, _ = setup(("m", 1, "INBOX"))
    uid_map.claimed = "someone else"
    server = FakeServer({"INBOX": set()})
    assert membership.run(server, account, ["INBOX"], noop).busy
    assert server.reads == [] and events_of(store, MessageDeleted) == []


def test_a_session_without_folder_uids_does_nothing() -> None:
    membership, store, _, account, _ = setup(("m", 1, "INBOX"))
    assert membership.run(object(), account, ["INBOX"], noop).moved == 0
    assert events_of(store, MessageDeleted) == []


def test_vanished_uids_expunge_without_a_search_and_a_lie_is_searched() -> None:
    membership, store, uid_map, account, _ = setup(
        ("m", 1, "INBOX"), ("m", 4, "Archive"), ("k", 2, "INBOX")
    )
    server = FakeServer({"INBOX": {2}, "Archive": {4}})
    said = Vanished(7, UidRanges.of([(1, 1)]), most_gone=1)
    placed = membership.run(server, account, [], noop, vanished={"INBOX": said})
    assert (placed.moved, placed.expunged, server.reads) == (1, 1, [])
    assert stored_folders(store.load(events_of(store, MessageFoldersChanged)[0].originator_id)) == (
        "Archive",
    )
    # "both gone" against counters that let one leave at most: searched, nothing deleted
    lie = Vanished(7, UidRanges.of([(2, 4)]), most_gone=0)
    placed = membership.run(server, account, [], noop, vanished={"INBOX": lie, "Archive": lie})
    assert sorted(server.reads) == ["Archive", "INBOX"] and placed.deleted == 0
    assert {(e.folder, e.uid) for e in uid_map.entries} == {("INBOX", 2), ("Archive", 4)}


def test_an_unexpunged_folder_is_read_without_a_search() -> None:
    """Its rows place their messages (a copy that arrived there), none is dropped."""
    membership, store, _, account, [m] = setup(("m", 1, "INBOX"), ("m", 9, "Archive"))
    server = FakeServer({"INBOX": {1}, "Archive": set()})
    placed = membership.run(server, account, [], noop, unexpunged=["Archive"])
    assert (placed.moved, placed.expunged, server.reads) == (1, 0, [])
    assert stored_folders(store.load(m)) == ("Archive", "INBOX")


class LabelServer(FakeServer):
    """A ``LabelReader`` too: All Mail's labels by UID (None: no X-GM-EXT-1)."""

    def __init__(self, folders: dict[str, set[int] | None], labels: dict[int, Any] | None):
        super().__init__(folders)
        self.labels = labels

    def folder_labels(self, folder: str) -> FolderLabels | None:
        if self.labels is None:
            return None
        self.reads.append(folder)
        return FolderLabels(self.uidvalidity, frozenset(self.labels), self.labels)


ALL = "[Gmail]/All Mail"


def test_labels_join_the_folders_and_unknown_labels_hold_the_message() -> None:
    membership, store, _, account, [a, b] = setup(("a", 1, ALL), ("b", 2, ALL))
    account.synced_folders = {"k": (ALL, "all"), "i": ("INBOX", "inbox")}
    server = LabelServer({"INBOX": set()}, {1: ("\\Inbox", "Work", "\\Important"), 2: None})
    placed = membership.run(server, account, ["INBOX", ALL], noop)
    [moved] = events_of(store, MessageFoldersChanged)
    assert (moved.originator_id, moved.folders) == (a, ["INBOX", "Work", ALL])
    assert placed.held == 1 and b not in {e.originator_id for e in store.events[2:]}


def test_an_all_folder_without_labels_is_a_folder_like_any_other() -> None:
    membership, store, _, account, _ = setup(("a", 1, ALL), ("b", 2, ALL))
    account.synced_folders = {"k": (ALL, "all")}
    placed = membership.run(LabelServer({ALL: {1}}, None), account, ["INBOX", ALL], noop)
    assert (placed.held, placed.deleted) == (0, 1)  # b expunged, a placed: nothing held
    assert events_of(store, MessageFoldersChanged) == []


def test_a_row_of_an_older_all_mail_uidvalidity_waits_for_one_of_now() -> None:
    membership, store, uid_map, account, [a] = setup(("a", 1, ALL))
    account.synced_folders = {"k": (ALL, "all")}
    server = LabelServer({}, {5: ("Work",)})
    server.uidvalidity = 8  # the rows are of 7
    assert membership.run(server, account, ["INBOX", ALL], noop).held == 1
    uid_map.entries.append(UidEntry(str(account.id), ALL, 8, 5, a, None))  # mapped anew
    membership.run(server, account, ["INBOX", ALL], noop)
    [moved] = events_of(store, MessageFoldersChanged)
    assert moved.folders == ["Work", ALL]
