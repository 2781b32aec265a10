"""NOTIFY's command and the news in IDLE lines, with byte literals: only a STATUS line of a
watched folder (or INBOX's own flag changes and expunges, or the server's overflow) is
news of changed folders; hostile lines are no news and never raise."""

from __future__ import annotations

import pytest

from infrastructure.imap import idle
from infrastructure.imap.idle import SHARED_NAME_SETS, news, shared_names
from infrastructure.imap.notify import (
    MAX_NAMED,
    notify_command,
    overflowed,
    quoted,
    status_folder,
    status_news,
)

EVENTS = b"(MessageNew MessageExpunge FlagChange)"
WATCHED = frozenset({"Archive", "Sent", "Entw\u00fcrfe", 'Odd "name"\\x'})


def test_the_command_names_exactly_the_synced_folders_beside_inbox_selected() -> None:
    command = notify_command(["INBOX", "Sent", "Archive"])
    assert command == (
        b"NOTIFY SET (selected " + EVENTS + b') (mailboxes ("Sent" "Archive") ' + EVENTS + b")"
    )


def test_names_are_modified_utf7_and_quoted() -> None:
    assert quoted("Entw\u00fcrfe") == b'"Entw&APw-rfe"'
    assert quoted('Odd "name"\\x') == b'"Odd \\"name\\"\\\\x"'
    assert quoted("") is None
    assert quoted("bad\r\nname") is None  # a control character cannot be quoted


def test_no_folder_to_push_is_notify_none() -> None:
    assert notify_command([]) == b"NOTIFY NONE"
    assert notify_command(["INBOX", "inbox", "\x01"]) == b"NOTIFY NONE"


def test_too_many_folders_ask_for_every_personal_folder_instead() -> None:
    many = [f"Folder {i}" for i in range(MAX_NAMED + 1)]
    assert notify_command(many) == (
        b"NOTIFY SET (selected " + EVENTS + b") (personal " + EVENTS + b")"
    )
    long_names = ["x" * 1000 for _ in range(10)]  # ten names, 10 KB of command
    assert b"(personal " in notify_command(long_names)


@pytest.mark.parametrize(
    ("line", "folder"),
    [
        (b"* STATUS Archive (MESSAGES 1 UIDNEXT 2 UIDVALIDITY 3 UNSEEN 1)", "Archive"),
        (b'* STATUS "Sent" (MESSAGES 1 HIGHESTMODSEQ 5)', "Sent"),
        (b"* status Entw&APw-rfe (UNSEEN 0)", "Entw\u00fcrfe"),
        (b'* STATUS "Odd \\"name\\"\\\\x" (MESSAGES 0)', 'Odd "name"\\x'),
        (b"* STATUS {7}", None),  # a literal name: no news
        (b'* STATUS "unterminated (MESSAGES 1)', None),
        (b'* STATUS "trailing\\', None),
        (b"* STATUS &Jjo (MESSAGES 1)", None),  # not modified UTF-7
        (b"* STATUS caf\xc3\xa9 (MESSAGES 1)", None),  # 8-bit
        (b"* STATUS", None),
        (b"* STATUS ", None),
        (b"* 3 EXISTS", None),
    ],
)
def test_the_folder_of_a_status_line(line: bytes, folder: str | None) -> None:
    assert status_folder(line) == folder


def test_status_lines_are_news_only_for_watched_folders() -> None:
    assert news([b"* STATUS Archive (MESSAGES 1)"], WATCHED).folders_changed
    assert not news([b"* STATUS Junk (MESSAGES 1)"], WATCHED).folders_changed
    assert not news([b"* STATUS INBOX (MESSAGES 1)"], WATCHED).folders_changed
    # Without NOTIFY set nothing but new mail and hang-ups counts, as before.
    plain = news([b"* STATUS Archive (MESSAGES 1)", b"* 1 FETCH (FLAGS (\\Seen))"])
    assert not plain.folders_changed and plain.heard


def test_inbox_flag_changes_and_expunges_are_news_with_notify() -> None:
    for line in (b"* 4 FETCH (FLAGS (\\Seen))", b"* 4 EXPUNGE", b"* VANISHED 4:5"):
        heard = news([line], WATCHED)
        assert heard.folders_changed and not heard.exists


def test_new_mail_is_not_news_of_folders() -> None:
    heard = news([b"* 5 EXISTS", b"* 1 RECENT"], WATCHED)
    assert heard.exists and not heard.folders_changed


def test_a_folder_named_like_news_is_a_folder() -> None:
    watched = frozenset({"EXISTS"})
    heard = news([b"* STATUS EXISTS (MESSAGES 1)"], watched)
    assert heard.folders_changed and not heard.exists


def test_the_servers_overflow_is_news() -> None:
    line = b"* OK [NOTIFICATIONOVERFLOW] Too many notifications"
    assert overflowed(line)
    assert news([line], WATCHED).folders_changed
    assert not news([b"* OK Still here"], WATCHED).folders_changed


def test_a_flood_of_hostile_lines_is_one_answer_and_never_raises() -> None:
    lines = [
        b"* STATUS " + b"x" * 100_000 + b" (MESSAGES 1)",
        b"* STATUS \x00\xff (",
        b"\x00" * 1000,
        b"* STATUS Junk (MESSAGES 1)",
    ] * 2_000
    heard = news(lines, WATCHED)
    assert not heard.folders_changed and heard.heard
    assert news([*lines, b"* STATUS Sent (MESSAGES 2)"], WATCHED).folders_changed


def test_status_data_kept_by_the_reader() -> None:
    assert status_news([b"Archive (MESSAGES 1)"], WATCHED)
    assert not status_news([b"Junk (MESSAGES 1)", (b"{3}", b"odd"), None], WATCHED)


def test_watches_of_equal_folder_names_share_one_set() -> None:
    first = shared_names(frozenset({"Sent", "Archive"}))
    again = shared_names(frozenset(["Archive", "Sent"]))
    assert again is first
    assert shared_names(frozenset({"Sent"})) == {"Sent"}


def test_a_server_naming_ever_new_folders_does_not_grow_the_shared_sets() -> None:
    for i in range(SHARED_NAME_SETS * 3):
        names = frozenset({f"hostile-{i}", "Sent"})
        assert shared_names(names) == names
        assert len(idle._name_sets) <= SHARED_NAME_SETS
