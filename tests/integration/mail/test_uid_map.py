"""The UID map's batch write (one statement on PostgreSQL, as the watch path's committer
writes a burst's rows): many accounts and folders at once, an existing row updated, and
a UID given twice in one call keeps the last, as rows written in turn would; on SQLite
and PostgreSQL, through the app's own port."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from application.app import App
from application.mail.flag_state import UidEntry


def test_a_batch_of_uid_rows_is_written_at_once_the_last_of_a_uid_winning(
    make_app: Callable[..., App],
) -> None:
    flags: Any = make_app().ctx.mail.flags
    accounts = [str(uuid.uuid4()) for _ in range(3)]
    first = {a: uuid.uuid4() for a in accounts}
    flags.remember([UidEntry(a, "INBOX", 7, 1, first[a], ("\\Seen",)) for a in accounts])
    later, twice = uuid.uuid4(), uuid.uuid4()
    flags.remember(
        [
            UidEntry(accounts[0], "INBOX", 8, 1, later, None),  # the row above, updated
            UidEntry(accounts[1], "Sent", 7, 2, uuid.uuid4(), ()),
            UidEntry(accounts[1], "Sent", 7, 2, twice, ("\\Flagged", "\\Seen")),
        ]
    )
    assert flags.mapped(accounts[0]) == [UidEntry(accounts[0], "INBOX", 8, 1, later, None)]
    assert sorted(flags.mapped(accounts[1]), key=lambda e: e.folder) == [
        UidEntry(accounts[1], "INBOX", 7, 1, first[accounts[1]], ("\\Seen",)),
        UidEntry(accounts[1], "Sent", 7, 2, twice, ("\\Flagged", "\\Seen")),
    ]
    assert flags.mapped(accounts[2]) == [
        UidEntry(accounts[2], "INBOX", 7, 1, first[accounts[2]], ("\\Seen",))
    ]
