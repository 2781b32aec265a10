"""The UID map's rebuild (``UidRemap``) with fakes: bounded per folder and poll, going on
from where it stopped, rows only for stored messages, once per UIDVALIDITY."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from application.mail import uid_remap
from application.mail.flag_state import UidEntry
from application.mail.uid_remap import UidRemap
from domain.message import message_id

ACCOUNT = str(uuid.uuid4())


class Walk:
    def __init__(self) -> None:
        self.remembered: list[UidEntry] = []
        self.next: dict[tuple[str, int], int] = {}

    def remember(self, entries: Sequence[UidEntry]) -> None:
        self.remembered += entries

    def remap_from(self, account_id: str, folder: str, uidvalidity: int) -> int:
        return self.next.get((folder, uidvalidity), 1)

    def save_remap(self, account_id: str, folder: str, uidvalidity: int, next_uid: int) -> None:
        self.next[(folder, uidvalidity)] = next_uid


class Server:
    """Each UID's provider id is ``p<uid>``; the UIDs asked are counted."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def folder_identities(self, uids: Sequence[int]) -> dict[int, str]:
        self.asked += uids
        return {u: f"p{u}" for u in uids} | {9999: "p9999"}  # and one not asked for


def make(stored: set[int]) -> tuple[UidRemap, Walk]:
    ids = {message_id(ACCOUNT, f"p{u}") for u in stored}
    store: Any = SimpleNamespace(existing=lambda wanted: set(wanted) & ids)
    walk = Walk()
    return UidRemap(SimpleNamespace(store=store), walk), walk  # type: ignore[arg-type]


def test_the_walk_is_bounded_per_poll_and_goes_on_where_it_stopped(monkeypatch: Any) -> None:
    monkeypatch.setattr(uid_remap, "MAX_PER_FOLDER", 4)
    remap, walk = make(stored={2, 3, 7, 9})
    server = Server()
    uids = set(range(1, 11))
    first = remap.rows_for(server, ACCOUNT, "INBOX", uidvalidity=5, uids=uids, mapped={1})
    assert server.asked == [2, 3, 4, 5] and [e.uid for e in first] == [2, 3]
    assert all(e.flags is None and e.uidvalidity == 5 for e in first)
    second = remap.rows_for(server, ACCOUNT, "INBOX", uidvalidity=5, uids=uids, mapped={1})
    assert server.asked[4:] == [6, 7, 8, 9] and [e.uid for e in second] == [7, 9]
    remap.rows_for(server, ACCOUNT, "INBOX", uidvalidity=5, uids=uids, mapped={1})
    assert server.asked[8:] == [10] and walk.next[("INBOX", 5)] == 11
    assert remap.rows_for(server, ACCOUNT, "INBOX", uidvalidity=5, uids=uids, mapped=set()) == []
    assert len(server.asked) == 9  # done: nothing asked again
    remap.rows_for(server, ACCOUNT, "INBOX", uidvalidity=6, uids={1}, mapped=set())
    assert server.asked[-1] == 1  # a new UIDVALIDITY walks again
    assert 9999 not in {e.uid for e in walk.remembered}


def test_a_session_that_cannot_tell_identities_asks_nothing() -> None:
    remap, walk = make(stored={1})
    assert remap.rows_for(object(), ACCOUNT, "INBOX", uidvalidity=5, uids={1}, mapped=set()) == []
    assert walk.next == {}
