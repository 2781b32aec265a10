"""The listing's write carries a renamed folder's operational rows (UID map, flag cursor,
deferred bodies) to its new name, also when two folders swap names, and marks a vanished
folder's map rows gone: on SQLite and PostgreSQL, through the app's own ports."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from application.app import App
from application.mail.deferred import DeferredBody
from application.mail.flag_state import FlagCursor, UidEntry
from application.mail.folder_state import FOLDER_GONE

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def test_renames_carry_and_a_vanished_folder_marks_its_rows(make_app: Callable[..., App]) -> None:
    mail: Any = make_app().ctx.mail
    account = str(uuid.uuid4())
    ids = {name: uuid.uuid4() for name in ("A", "B", "C")}
    mail.flags.remember([UidEntry(account, n, 7, 1, ids[n], None) for n in ("A", "B", "C")])
    for name in ("A", "B"):
        mail.flags.save(account, name, FlagCursor(7, modseq=len(name) + (name == "B")), [])
    mail.deferred.hold([DeferredBody(account, "t", str(ids["A"]), 7, 1, 10, "A")])

    mail.folders.save_listing(account, [], [], NOW, renamed={"A": "B", "B": "A"}, vanished=["C"])

    rows = {(e.folder, e.uidvalidity): e.message_id for e in mail.flags.mapped(account)}
    assert rows == {("B", 7): ids["A"], ("A", 7): ids["B"], ("C", FOLDER_GONE): ids["C"]}
    assert mail.flags.cursor(account, "B").modseq == 1  # A's cursor, now B's
    assert mail.flags.cursor(account, "A").modseq == 2
    assert mail.deferred.due(account, 10)[0].folder == "B"
