"""Indexes that tables made before them gain at start-up are made once: every start of an
app on the same database, and a rebuild between them, leave one index of each purpose
(the folder filter's index on the messages, the outbox's due index). Before, a start
made another folder index each time (names are unique per creation, so
``IF NOT EXISTS`` never matched). Copies left by such starts are dropped."""

from __future__ import annotations

import re
from collections.abc import Callable

from application.app import App
from infrastructure.bootstrap import open_database
from infrastructure.sql.database import DatabaseUrl
from projections.base import index_name
from projections.indexes import index_names

WATCHED = {"mail_messages": "folder", "mail_outbound": "account_due"}


def purposes(database_url: str) -> dict[str, list[str]]:
    """The indexes of each watched purpose, by table."""
    db = open_database(DatabaseUrl.parse(database_url))
    try:
        with db.reading() as cur:
            found: dict[str, list[str]] = {}
            for table, purpose in WATCHED.items():
                names = index_names(cur, db.dialect, table)
                found[table] = [n for n in names if re.search(rf"_{purpose}_[0-9a-f]{{8}}$", n)]
            return found
    finally:
        db.close()


def test_starts_and_rebuilds_leave_one_index_of_each_purpose(
    make_app: Callable[..., App], database_url: str
) -> None:
    make_app().close()
    assert {t: len(n) for t, n in purposes(database_url).items()} == {t: 1 for t in WATCHED}
    make_app().close()
    make_app().projections.rebuild()
    make_app().close()
    assert {t: len(n) for t, n in purposes(database_url).items()} == {t: 1 for t in WATCHED}


def test_copies_left_by_earlier_starts_are_dropped(
    make_app: Callable[..., App], database_url: str
) -> None:
    make_app().close()
    db = open_database(DatabaseUrl.parse(database_url))
    try:
        with db.transaction() as cur:
            for _ in range(3):  # what three starts before the fix left
                name = index_name("mail_messages", "folder")
                cur.execute(
                    f"CREATE INDEX {name} ON mail_messages (tenant_id, folder, received_at)"
                )
    finally:
        db.close()
    assert len(purposes(database_url)["mail_messages"]) == 4
    make_app().close()
    assert len(purposes(database_url)["mail_messages"]) == 1
