"""Gmail's labels as folder names (``label_folders``): system labels by the synced
folders' roles, user labels bounded like keywords."""

from __future__ import annotations

from application.mail.gmail_labels import MAX_LABELS, label_folders

ROLES = {"inbox": "INBOX", "sent": "[Gmail]/Sent Mail", "all": "[Gmail]/All Mail"}


def test_system_labels_name_the_synced_folder_of_their_role_or_nothing() -> None:
    got = label_folders(["\\Inbox", "\\SENT", "\\Important", "\\Starred", "\\Draft"], ROLES)
    assert got.folders == {"INBOX", "[Gmail]/Sent Mail"} and got.dropped == 0


def test_user_labels_are_bounded_and_the_rest_counted() -> None:
    hostile = ["x" * 256, "ctl\x01", "del\x7f", "c1\x85", "", "\ud800"]
    many = [f"L{i:03d}" for i in range(MAX_LABELS + 20)]
    got = label_folders(["Work", "\u00e9t\u00e9", *hostile, *many], ROLES)
    kept = sorted(["Work", "\u00e9t\u00e9", *many])[:MAX_LABELS]
    assert got.folders == set(kept)
    assert got.dropped == len(hostile) + 22
    assert label_folders(["y" * 255], ROLES).folders == {"y" * 255}
