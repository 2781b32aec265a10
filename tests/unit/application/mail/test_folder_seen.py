"""What a poll may leave unopened (``folder_seen``): the counters compared, EmailEngine's
arithmetic for expunges, when QRESYNC is asked, and what is saved (only folders whose
every step completed; nothing forgotten counts)."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from application.mail.folder_listing import FolderStatus
from application.mail.folder_reads import membership_reads, most_gone, vanished_of
from application.mail.folder_seen import (
    NO_QRESYNC,
    FolderSeen,
    PollPlan,
    membership_read,
    seen_of,
)
from application.mail.ports import MailboxStatus
from application.mail.resync import Resynced, UidRanges

BEFORE = FolderSeen(7, 101, 100, 50)


def test_membership_reads() -> None:
    assert membership_read(None, BEFORE) == "search"
    assert membership_read(BEFORE, None) == "search"
    assert membership_read(BEFORE, FolderSeen(8, 101, 100, 50)) == "search"  # reset
    assert membership_read(BEFORE, FolderSeen(7, 101, 100, 60)) == "skip"  # flags only
    assert membership_read(BEFORE, FolderSeen(7, 104, 103, 60)) == "unexpunged"  # 3 came
    assert membership_read(BEFORE, FolderSeen(7, 104, 102, 60)) == "search"  # 3 came, 1 left
    assert membership_read(BEFORE, FolderSeen(7, 102, 100, 60)) == "search"  # expunge + append
    assert membership_read(BEFORE, FolderSeen(7, 101, 99, 60)) == "search"  # an expunge
    assert membership_read(BEFORE, FolderSeen(7, 101, 100, 40)) == "search"  # modseq down


def test_seen_of_needs_every_counter() -> None:
    assert seen_of(FolderStatus(messages=3, uidnext=4, uidvalidity=7)) == FolderSeen(7, 4, 3)
    assert seen_of(FolderStatus(messages=3, uidnext=None, uidvalidity=7)) is None
    assert seen_of(MailboxStatus(7, 4, 9, 3)) == FolderSeen(7, 4, 3, 9)
    assert seen_of(MailboxStatus(7, None, 9, 3)) is None
    assert seen_of(None) is None


class Session:
    """A ``StatusSession``: LIST-STATUS's counters (None: not offered), EXAMINEs."""

    def __init__(self, listed: Mapping[str, FolderStatus] | None) -> None:
        self.listed = listed
        self.opened: dict[str, MailboxStatus] = {}

    def folder_statuses(self) -> Mapping[str, FolderStatus] | None:
        return self.listed

    def examined(self, folder: str) -> MailboxStatus | None:
        return self.opened.get(folder)


class Store:
    def __init__(self, seen: dict[str, FolderSeen]) -> None:
        self.saved = dict(seen)

    def seen(self, account_id: str) -> dict[str, FolderSeen]:
        return dict(self.saved)

    def save_seen(self, account_id: str, seen: Mapping[str, FolderSeen]) -> None:
        self.saved.update(seen)


def status(messages: int, uidnext: int, modseq: int | None = 50) -> FolderStatus:
    return FolderStatus(messages=messages, uidnext=uidnext, uidvalidity=7, highestmodseq=modseq)


def test_with_list_status_unchanged_folders_are_not_opened() -> None:
    store = Store({"INBOX": BEFORE, "Archive": BEFORE, "Sent": BEFORE})
    listed = {"INBOX": status(100, 101), "Archive": status(99, 101, 51), "Sent": status(101, 102)}
    plan = PollPlan(Session(listed), store, "a")
    assert plan.unopened("INBOX") and plan.unopened("Archive") and not plan.unopened("Sent")
    assert plan.membership("INBOX") == "skip" and plan.membership("Archive") == "search"
    assert plan.resync_from("INBOX") is None and plan.resync_from("Archive") == BEFORE
    assert not plan.unopened("Drafts") and plan.membership("Drafts") == "search"  # never seen
    plan.incomplete(["Sent"])
    plan.save(["INBOX", "Archive", "Sent"])
    assert store.saved["Archive"] == FolderSeen(7, 101, 99, 51)
    assert store.saved["Sent"] == BEFORE  # left something for later: read again


def test_a_folder_whose_qresync_answer_was_too_large_is_searched_until_a_reset() -> None:
    store = Store({"INBOX": BEFORE})
    plan = PollPlan(Session({"INBOX": status(99, 102, 60)}), store, "a")
    assert plan.resync_from("INBOX") == BEFORE
    plan.refuse_qresync("INBOX")  # saved at once: the poll fails after it
    assert store.saved["INBOX"] == FolderSeen(7, 101, 100, NO_QRESYNC)
    plan = PollPlan(Session({"INBOX": status(99, 102, 60)}), store, "a")
    assert plan.resync_from("INBOX") is None and plan.membership("INBOX") == "search"
    plan.save(["INBOX"])  # the refusal stays with the counters of now
    assert store.saved["INBOX"] == FolderSeen(7, 102, 99, NO_QRESYNC)
    plan = PollPlan(Session({"INBOX": status(98, 103, 70)}), store, "a")
    assert plan.resync_from("INBOX") is None
    reset = FolderStatus(messages=5, uidnext=6, uidvalidity=8, highestmodseq=9)
    plan = PollPlan(Session({"INBOX": reset}), store, "a")
    plan.save(["INBOX"])  # a new UIDVALIDITY: QRESYNC may be asked again
    assert store.saved["INBOX"] == FolderSeen(8, 6, 5, 9)


def test_without_list_status_the_first_examine_counts() -> None:
    session = Session(None)
    store = Store({"INBOX": BEFORE})
    plan = PollPlan(session, store, "a")
    assert not plan.unopened("INBOX") and plan.now("INBOX") is None
    session.opened["INBOX"] = MailboxStatus(7, 101, 50, 100)
    assert plan.membership("INBOX") == "skip"
    plan.forget(["INBOX"])  # read from no cursor: nothing believed counts
    assert plan.membership("INBOX") == "search"


def test_a_vanished_answer_is_bounded_by_the_counters() -> None:
    assert most_gone(BEFORE, 101, 100) == 0
    assert most_gone(BEFORE, 103, 100) == 2  # two appended, MESSAGES the same
    assert most_gone(BEFORE, 101, 90) == 10
    assert most_gone(BEFORE, 101, 200) == 0
    answer = Resynced(MailboxStatus(7, 101, 60, 98), UidRanges.of([(3, 4)]), {})
    vanished = vanished_of(BEFORE, (answer, 50))
    assert vanished is not None and vanished.most_gone == 2 and 3 in vanished.uids
    assert vanished_of(BEFORE, (Resynced(answer.status, None, {}), 50)) is None
    reset = Resynced(MailboxStatus(8, 101, 60, 98), UidRanges.of([(3, 4)]), {})
    assert vanished_of(BEFORE, (reset, 50)) is None and vanished_of(None, (answer, 50)) is None


class Walk:
    """The membership pass's side of the UID map's rebuild: which folders it has still
    to walk, and where a grown folder's walk goes on."""

    def __init__(self, pending: set[str]) -> None:
        self.pending = pending
        self.grew: dict[str, int] = {}

    def remap_pending(self, account_id: str, folder: str, uidvalidity: int, uidnext: int) -> bool:
        return folder in self.pending

    def remap_grew(self, account_id: str, folder: str, uidvalidity: int, uidnext: int) -> None:
        self.grew[folder] = uidnext


def test_membership_reads_per_folder() -> None:
    names = ["INBOX", "Archive", "Sent", "Junk", "Trash"]
    store = Store(dict.fromkeys(names, BEFORE))
    listed = {
        "INBOX": status(100, 101),  # unchanged
        "Archive": status(102, 103, 51),  # grew by two
        "Sent": status(99, 101, 51),  # an expunge
        "Junk": status(100, 101),  # unchanged, but the rebuild has still to walk it
        "Trash": status(98, 101, 52),  # two expunges, named by QRESYNC
    }
    plan = PollPlan(Session(listed), store, "a")
    walk = Walk({"Junk"})
    answer = Resynced(MailboxStatus(7, 101, 52, 98), UidRanges.of([(5, 6)]), {})
    account: Any = SimpleNamespace(id="a")
    reads = membership_reads(
        plan, walk, account, object(), names=names, resynced={"Trash": (answer, 50)}
    )
    assert (reads.search, reads.unexpunged, list(reads.vanished)) == (
        ["Sent", "Junk"],
        ["Archive"],
        ["Trash"],
    )
    assert reads.vanished["Trash"].most_gone == 2 and walk.grew == {"Archive": 103}
