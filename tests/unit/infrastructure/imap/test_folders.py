"""Folder discovery's pure side (``folders.build_listing``, ``folders.list_arguments``), fed
raw imaplib data as byte literals: roles from the server or from well-known names, and
every bound a hostile LIST answer meets."""

from __future__ import annotations

from typing import Any

from application.mail.folder_listing import FolderListing, FolderStatus
from infrastructure.imap.folders import (
    MAX_DEPTH,
    MAX_NAME_BYTES,
    build_listing,
    list_arguments,
    mailbox_id_arguments,
)

DOVECOT = frozenset({"IMAP4REV1", "LIST-EXTENDED", "LIST-STATUS", "SPECIAL-USE", "CONDSTORE"})
PLAIN = frozenset({"IMAP4REV1"})


def listing(lines: list[Any], caps: frozenset[str] = PLAIN, **kw: Any) -> FolderListing:
    return build_listing(lines, kw.pop("status", []), caps, **kw)


def roles(result: FolderListing) -> dict[str, tuple[str | None, str | None]]:
    return {f.name: (f.role, f.role_source) for f in result.folders}


def test_the_command_asks_for_what_the_server_offers_and_no_more() -> None:
    assert list_arguments(PLAIN) == (b'""', b'"*"')
    assert list_arguments(frozenset({"SPECIAL-USE"})) == (b'""', b'"*"')  # no RETURN without
    assert list_arguments(DOVECOT) == (
        b'""',
        b'"*"',
        b"RETURN",
        b"(SPECIAL-USE STATUS (MESSAGES UIDNEXT UIDVALIDITY HIGHESTMODSEQ))",
    )
    # MAILBOXID has a LIST of its own (Cyrus 3.6 garbles it beside the counters).
    assert list_arguments(frozenset({"LIST-STATUS", "OBJECTID"}))[-1] == (
        b"(STATUS (MESSAGES UIDNEXT UIDVALIDITY))"
    )
    assert mailbox_id_arguments(frozenset({"LIST-STATUS", "OBJECTID"})) == (
        b'""',
        b'"*"',
        b"RETURN",
        b"(STATUS (UIDVALIDITY MAILBOXID))",
    )
    assert mailbox_id_arguments(frozenset({"OBJECTID"})) is None
    assert mailbox_id_arguments(DOVECOT) is None
    assert list_arguments(frozenset({"LIST-EXTENDED"})) == (b'""', b'"*"')


def test_server_attributes_give_roles_and_status_comes_from_list_status() -> None:
    result = listing(
        [
            b'(\\HasNoChildren) "." INBOX',
            b'(\\HasNoChildren \\Sent) "." "Sent Items"',
            b'(\\HasNoChildren \\Trash) "." Bin',
            b'(\\HasNoChildren) "." Trash',  # a name never overrides the server
            b'(\\HasNoChildren \\Drafts) "." Drafts',
        ],
        DOVECOT,
        status=[b'"Sent Items" (MESSAGES 2 UIDNEXT 3 UIDVALIDITY 44 HIGHESTMODSEQ 5)'],
    )
    assert roles(result) == {
        "INBOX": ("inbox", "server"),
        "Sent Items": ("sent", "server"),
        "Bin": ("trash", "server"),
        "Trash": (None, None),
        "Drafts": ("drafts", "server"),
    }
    sent = result.by_name("Sent Items")
    assert sent is not None and sent.status == FolderStatus(2, 3, 44, 5)
    assert result.special_use and result.dropped == ()


def test_without_special_use_well_known_names_give_roles_at_the_top_level_only() -> None:
    result = listing(
        [
            b'() "/" INBOX',
            b'() "/" "Sent Messages"',
            b'() "/" "Deleted Items"',
            b'() "/" INBOX/Drafts',
            b'() "/" Projects/Archive',  # a project's folder, not the archive
            b'(\\Noselect) "/" Junk',  # cannot hold mail
        ]
    )
    assert roles(result) == {
        "INBOX": ("inbox", "server"),
        "Sent Messages": ("sent", "name"),
        "Deleted Items": ("trash", "name"),
        "INBOX/Drafts": ("drafts", "name"),
        "Projects/Archive": (None, None),
        "Junk": (None, None),
    }
    assert not result.special_use


def test_gmail_names_and_attributes() -> None:
    result = listing(
        [
            b'(\\HasNoChildren) "/" INBOX',
            b'(\\HasChildren \\Noselect) "/" "[Gmail]"',
            b'(\\All \\HasNoChildren) "/" "[Gmail]/All Mail"',
            b'(\\HasNoChildren) "/" "[Gmail]/Sent Mail"',
            b'(\\HasNoChildren) "/" "[Gmail]/Spam"',
            b'(\\HasNoChildren) "/" "[Google Mail]/Bin"',
        ]
    )
    assert roles(result)["[Gmail]/All Mail"] == ("all", "server")
    assert roles(result)["[Gmail]/Sent Mail"] == ("sent", "name")
    assert roles(result)["[Gmail]/Spam"] == ("junk", "name")
    assert roles(result)["[Google Mail]/Bin"] == ("trash", "name")


def test_duplicate_roles_keep_the_first_claim_and_ambiguous_names_give_none() -> None:
    result = listing(
        [
            b'() "." INBOX',
            b'(\\Sent) "." Sent',
            b'(\\Sent) "." Sent2',  # a second \Sent: set aside
            b'() "." Junk',
            b'() "." Spam',  # two names claim junk: neither gets it
            b'() "." Inbox',  # INBOX again, in another case
        ]
    )
    assert roles(result) == {
        "INBOX": ("inbox", "server"),
        "Sent": ("sent", "server"),
        "Sent2": (None, None),
        "Junk": (None, None),
        "Spam": (None, None),
    }
    assert result.unroled == 3
    assert dict(result.dropped) == {"duplicate_name": 1}
    sent2 = result.by_name("Sent2")
    assert sent2 is not None and "\\Sent" in sent2.attributes


def test_hostile_names_are_left_out_and_counted() -> None:
    deep = b".".join([b"d"] * (MAX_DEPTH + 1))
    result = listing(
        [
            b'() "." INBOX',
            b'() "." ctl&AAE-name',  # U+0001, modified UTF-7 encoded
            b'() "." del&AH8-',  # DEL
            b'() "." c1&AIU-',  # a C1 control (NEL)
            (b'() "." {8}', b"tab\there"),
            b"",
            b'() "." ' + b"x" * (MAX_NAME_BYTES + 1),
            b'() "." ' + deep,
            b'() "." caf\xc3\xa9',
            b"* garbage",
            b'() "." ' + b".".join([b"d"] * MAX_DEPTH),  # exactly the deepest allowed
        ]
    )
    assert [f.name for f in result.folders] == ["INBOX", ".".join(["d"] * MAX_DEPTH)]
    assert dict(result.dropped) == {
        "control_characters": 3,
        "undecodable": 2,
        "name_too_long": 1,
        "too_deep": 1,
        "malformed": 1,
    }


def test_thousands_of_folders_are_capped_keeping_inbox_and_roles_first() -> None:
    lines: list[Any] = [b'() "/" f%05d' % i for i in range(5000)]
    lines += [b'(\\Sent) "/" Sent', b'() "/" INBOX']
    result = listing(lines, frozenset({"SPECIAL-USE"}), max_folders=100)
    names = [f.name for f in result.folders]
    assert len(names) == 100
    assert "INBOX" in names and "Sent" in names
    assert names[:3] == ["f00000", "f00001", "f00002"]  # then in the server's order
    assert dict(result.dropped) == {"over_cap": 4902}


def test_attributes_are_bounded_and_spelled_as_the_rfc_does() -> None:
    attrs = b" ".join(b"\\X%d" % i for i in range(100))
    result = listing([b"(\\hasnochildren \\NOSELECT " + attrs + b') "/" INBOX'])
    (inbox,) = result.folders
    assert "\\HasNoChildren" in inbox.attributes and "\\Noselect" in inbox.attributes
    assert len(inbox.attributes) == 32
    assert not inbox.selectable


def test_status_for_unknown_names_or_bad_values_is_ignored() -> None:
    result = listing(
        [b'() "/" INBOX', b'() "/" A'],
        DOVECOT,
        status=[
            b"Nowhere (MESSAGES 1)",
            b"A (MESSAGES 4294967296 UIDVALIDITY 0 UIDNEXT 2)",
            b"A (MESSAGES 9)",  # a second answer for A: the first stands
            b"garbage (",
            b"inbox (UIDVALIDITY 7)",
        ],
    )
    a, inbox = result.by_name("A"), result.by_name("INBOX")
    assert a is not None and a.status == FolderStatus(None, 2, None, None)
    assert inbox is not None and inbox.status == FolderStatus(uidvalidity=7)


def test_mailbox_ids_come_from_their_own_list_status_where_the_uidvalidity_agrees() -> None:
    caps = frozenset({"LIST-STATUS", "OBJECTID"})
    result = listing(
        [b'() "/" INBOX', b'() "/" Work', b'() "/" Made-again', b'() "/" Garbled'],
        caps,
        status=[
            b"Work (UIDVALIDITY 3 MAILBOXID (ignored))",
            b"INBOX (UIDVALIDITY 1)",
            b"Made-again (UIDVALIDITY 5)",
            b"Garbled (UIDVALIDITY 6)",
        ],
        id_status_data=[
            b"Work (UIDVALIDITY 3 MAILBOXID (Fwork-1))",
            b"INBOX (UIDVALIDITY 1 MAILBOXID (F-in))",
            b"Made-again (UIDVALIDITY 8 MAILBOXID (F-new))",  # deleted and made between
            b"Garbled (UIDVALIDITY 6 MAILBOXID (\xf04\x85\xc0\xcfU))",  # Cyrus 3.6's bytes
        ],
    )
    assert {f.name: f.mailbox_id for f in result.folders} == {
        "INBOX": "F-in",
        "Work": "Fwork-1",
        "Made-again": None,
        "Garbled": None,
    }
