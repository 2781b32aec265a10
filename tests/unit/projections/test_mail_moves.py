"""The ``folder`` filter's membership test (``FOLDER_MEMBER``) on SQLite in memory:
whole elements only, case-sensitive, hostile names (quotes, commas, LIKE wildcards)
matched exactly, and rows from before ``folders`` was kept matched by ``folder``."""

from __future__ import annotations

import sqlite3

import pytest

from projections.mail_moves import FOLDER_MEMBER, folder_member_params, folders_json

HOSTILE = ['x", "b', "b", "a,b", "%", "_", "Ärchiv", "\\", 'q"', "[", "]", "Archive"]


@pytest.fixture
def db() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE m (id INTEGER, folder TEXT, folders TEXT)")
    for i, name in enumerate(HOSTILE):
        conn.execute("INSERT INTO m VALUES (?, ?, ?)", (i, "INBOX", folders_json([name])))
    conn.execute("INSERT INTO m VALUES (100, 'INBOX', ?)", (folders_json(["INBOX", "b"]),))
    conn.execute("INSERT INTO m VALUES (101, 'Old', NULL)")  # before folders was kept
    return conn


def matching(db: sqlite3.Connection, folder: str) -> set[int]:
    rows = db.execute(f"SELECT id FROM m WHERE {FOLDER_MEMBER}", folder_member_params(folder))
    return {row[0] for row in rows}


def test_each_name_matches_its_own_rows_only(db: sqlite3.Connection) -> None:
    for i, name in enumerate(HOSTILE):
        expected = {i} | ({100} if name == "b" else set())
        assert matching(db, name) == expected, name


def test_case_and_parts_do_not_match(db: sqlite3.Connection) -> None:
    assert matching(db, "archive") == set()
    assert matching(db, "Arch") == set()
    assert matching(db, "x") == set()
    assert matching(db, "INBOX") == {100}  # the folder found first is not membership


def test_rows_without_folders_match_their_folder(db: sqlite3.Connection) -> None:
    assert matching(db, "Old") == {101}
