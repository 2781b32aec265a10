"""``MailAccount.record_folders``: given the folders the stream holds, when a listing is
recorded, then only its differences are events."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from domain.mail_account import (
    AccountDeleted,
    MailAccount,
    MailFolderGone,
    MailFolderListed,
    MailFolderRenamed,
)

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def connected() -> MailAccount:
    account = MailAccount(uuid.uuid4())
    account.connect(
        now=NOW,
        tenant_id="t1",
        owner_user_id=None,
        scope="shared",
        provider="imap",
        auth_method="password",
        display_name="sealed",
        address="sealed",
        imap={"host": "h", "port": 993, "security": "tls", "username": "sealed"},
        trusted_authserv_id=None,
    )
    account.collect()
    return account


def test_a_first_listing_lists_every_folder_and_an_equal_one_records_nothing() -> None:
    account = connected()
    listing = {"k1": ("INBOX", "inbox"), "k2": ("Sent", "sent")}
    assert account.record_folders(listing, now=NOW)
    events = account.collect()
    assert [(type(e), getattr(e, "folder_key", None)) for e in events] == [
        (MailFolderListed, "k1"),
        (MailFolderListed, "k2"),
    ]
    assert not account.record_folders(dict(listing), now=NOW)
    assert account.collect() == []


def test_a_rename_a_new_role_and_a_folder_gone_are_one_event_each() -> None:
    account = connected()
    account.record_folders(
        {"k1": ("INBOX", "inbox"), "k2": ("Sent", "sent"), "k3": ("Old", None)}, now=NOW
    )
    account.collect()
    account.record_folders({"k1": ("INBOX", "inbox"), "k2": ("Sent Items", "archive")}, now=NOW)
    events = account.collect()
    assert [type(e) for e in events] == [MailFolderGone, MailFolderRenamed, MailFolderListed]
    gone, renamed, listed = events
    assert isinstance(gone, MailFolderGone) and gone.name == "Old"
    assert isinstance(renamed, MailFolderRenamed)
    assert (renamed.old_name, renamed.name) == ("Sent", "Sent Items")
    assert isinstance(listed, MailFolderListed) and listed.role == "archive"
    assert account.synced_folders == {"k1": ("INBOX", "inbox"), "k2": ("Sent Items", "archive")}


def test_a_deleted_account_records_no_folders() -> None:
    account = connected()
    account.delete(now=NOW)
    with pytest.raises(AccountDeleted):
        account.record_folders({"k1": ("INBOX", "inbox")}, now=NOW)
