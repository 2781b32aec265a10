"""The folder policy (``application.mail.folders``): which folders an account syncs, and how
a new LIST answer matches the folders known (renames, resets, folders gone)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from application.mail.folder_listing import Folder, FolderRole, FolderStatus
from application.mail.folders import (
    FolderChanges,
    FolderSelection,
    FolderSettingInvalid,
    KnownFolder,
    folders_to_sync,
    known_from,
    match_listing,
    parse_folder_setting,
)


def folder(
    name: str,
    role: FolderRole | None = None,
    *,
    validity: int | None = None,
    mailbox_id: str | None = None,
    noselect: bool = False,
) -> Folder:
    return Folder(
        name=name,
        delimiter="/",
        role=role,
        role_source="server" if role else None,
        attributes=frozenset({"\\Noselect"} if noselect else set()),
        mailbox_id=mailbox_id,
        status=FolderStatus(uidvalidity=validity) if validity is not None else None,
    )


LISTING = [
    folder("INBOX", "inbox"),
    folder("Sent", "sent"),
    folder("Archive", "archive"),
    folder("Drafts", "drafts"),
    folder("Junk", "junk"),
    folder("Trash", "trash"),
    folder("Flagged", "flagged"),
    folder("Projects"),
    folder("Shared", noselect=True),
]


def names(folders: tuple[Folder, ...]) -> list[str]:
    return [f.name for f in folders]


# -- the setting -----------------------------------------------------------------


def test_the_setting_is_special_by_default() -> None:
    assert parse_folder_setting(None) == FolderSelection("special")
    assert parse_folder_setting("special") == FolderSelection("special")
    assert parse_folder_setting("all") == FolderSelection("all")
    assert parse_folder_setting(["Projects", "inbox", "Projects"]) == FolderSelection(
        "names", ("Projects", "INBOX")
    )


@pytest.mark.parametrize(
    "value",
    [
        "everything",
        [],
        [f"n{i}" for i in range(101)],
        [""],
        ["x" * 1025],
        ["tab\there"],
        ["nel\x85"],
        [3],
        {"a": 1},
        7,
    ],
)
def test_a_setting_that_is_none_of_the_three_is_refused(value: object) -> None:
    with pytest.raises(FolderSettingInvalid):
        parse_folder_setting(value)


# -- which folders ----------------------------------------------------------------


def test_special_syncs_inbox_and_the_special_use_folders() -> None:
    chosen = folders_to_sync(LISTING, FolderSelection("special"))
    assert names(chosen.folders) == ["INBOX", "Sent", "Archive", "Drafts", "Junk", "Trash"]


def test_all_syncs_every_selectable_folder() -> None:
    chosen = folders_to_sync(LISTING, FolderSelection("all"))
    assert "Shared" not in names(chosen.folders) and "Projects" in names(chosen.folders)
    assert len(chosen.folders) == len(LISTING) - 1


def test_names_sync_inbox_and_those_names_and_say_which_are_missing() -> None:
    chosen = folders_to_sync(LISTING, FolderSelection("names", ("Projects", "Nope", "Shared")))
    assert names(chosen.folders) == ["INBOX", "Projects"]
    assert chosen.missing == ("Nope", "Shared")


def test_on_gmail_special_syncs_all_mail_sent_junk_trash_and_inbox_not_each_label() -> None:
    gmail = [
        folder("INBOX", "inbox"),
        folder("[Gmail]/All Mail", "all"),
        folder("[Gmail]/Sent Mail", "sent"),
        folder("[Gmail]/Spam", "junk"),
        folder("[Gmail]/Trash", "trash"),
        folder("Customers"),
    ]
    chosen = folders_to_sync(gmail, FolderSelection("special"))
    assert names(chosen.folders) == [
        "INBOX",
        "[Gmail]/All Mail",
        "[Gmail]/Sent Mail",
        "[Gmail]/Spam",
        "[Gmail]/Trash",
    ]


# -- matching a listing -----------------------------------------------------------


def test_same_mailbox_id_under_a_new_name_is_a_rename() -> None:
    known = [KnownFolder("INBOX", 1, "F0"), KnownFolder("Work", 7, "F1")]
    changes = match_listing(
        known, [folder("INBOX", mailbox_id="F0"), folder("Job", validity=7, mailbox_id="F1")]
    )
    assert [(k.name, f.name) for k, f in changes.renamed] == [("Work", "Job")]
    assert changes.gone == () and changes.added == ()


def test_a_new_uidvalidity_is_a_reset() -> None:
    known = [KnownFolder("INBOX", 1), KnownFolder("Sent", 5)]
    changes = match_listing(known, [folder("INBOX", validity=1), folder("Sent", validity=6)])
    assert [(k.name, f.name) for k, f in changes.reset] == [("Sent", "Sent")]
    assert len(changes.unchanged) == 1


def test_without_mailbox_id_a_rename_is_a_folder_gone_and_a_folder_new() -> None:
    known = [KnownFolder("INBOX", 1), KnownFolder("Work", 7)]
    changes = match_listing(known, [folder("INBOX", validity=1), folder("Job", validity=7)])
    assert [k.name for k in changes.gone] == ["Work"]
    assert names(changes.added) == ["Job"]


def test_another_mailbox_id_under_a_known_name_is_another_folder() -> None:
    known = [KnownFolder("INBOX"), KnownFolder("Work", 7, "F1")]
    changes = match_listing(known, [folder("INBOX"), folder("Work", validity=7, mailbox_id="F9")])
    assert [k.name for k in changes.gone] == ["Work"] and names(changes.added) == ["Work"]


def test_a_listing_without_inbox_is_not_believed() -> None:
    known = [KnownFolder("INBOX", 1), KnownFolder("Sent", 2)]
    assert match_listing(known, []) == FolderChanges(suspect=True)
    assert match_listing(known, [folder("Sent", validity=2)]).suspect


def test_duplicate_mailbox_ids_are_not_trusted() -> None:
    known = [KnownFolder("INBOX"), KnownFolder("A", None, "F1")]
    changes = match_listing(
        known, [folder("INBOX"), folder("B", mailbox_id="F1"), folder("C", mailbox_id="F1")]
    )
    assert [k.name for k in changes.gone] == ["A"]
    assert names(changes.added) == ["B", "C"]
    assert changes.notes == ("duplicate_mailbox_id",)


def test_a_known_mailbox_id_still_matches_by_name_when_the_server_stops_telling_it() -> None:
    known = [KnownFolder("INBOX", 1, "F0"), KnownFolder("Work", 7, "F1")]
    changes = match_listing(known, [folder("INBOX"), folder("Work")])
    assert len(changes.unchanged) == 2


# -- properties -------------------------------------------------------------------

_names = st.sampled_from(["INBOX", "Sent", "Archive", "Work", "Job", "a/b", "x", "y", "z"])


@st.composite
def listings(draw: st.DrawFn) -> list[Folder]:
    chosen = draw(st.lists(_names, unique=True, max_size=8))
    out = [folder("INBOX", validity=1, mailbox_id=draw(st.sampled_from([None, "Fin"])))]
    for i, name in enumerate(n for n in chosen if n != "INBOX"):
        mid = draw(st.sampled_from([None, f"F{i}", "Fdup"]))
        out.append(folder(name, validity=draw(st.integers(1, 3)), mailbox_id=mid))
    return out


@st.composite
def knowns(draw: st.DrawFn) -> list[KnownFolder]:
    chosen = draw(st.lists(_names, unique=True, max_size=8))
    return [
        KnownFolder(
            name,
            draw(st.one_of(st.none(), st.integers(1, 3))),
            draw(st.sampled_from([None, "F0", "F1", "F2", "Fin"])),
        )
        for name in chosen
    ]


@given(knowns(), listings())
def test_every_folder_lands_in_exactly_one_outcome(
    known: list[KnownFolder], listed: list[Folder]
) -> None:
    changes = match_listing(known, listed)
    known_out = [k for k, _ in changes.unchanged + changes.renamed + changes.reset] + list(
        changes.gone
    )
    listed_out = [f for _, f in changes.unchanged + changes.renamed + changes.reset] + list(
        changes.added
    )
    assert sorted(map(id, known_out)) == sorted(map(id, known))
    assert sorted(map(id, listed_out)) == sorted(map(id, listed))


@given(listings())
def test_a_listing_matched_against_itself_changes_nothing(listed: list[Folder]) -> None:
    changes = match_listing([known_from(f) for f in listed], listed)
    assert len(changes.unchanged) == len(listed)
    assert not (changes.renamed or changes.reset or changes.added or changes.gone)


@given(listings(), st.data())
def test_renaming_folders_with_unique_ids_keeps_them(
    listed: list[Folder], data: st.DataObject
) -> None:
    known = [known_from(f) for f in listed]
    ids = [f.mailbox_id for f in listed]
    renamed = [
        f
        if f.name == "INBOX"
        or not f.mailbox_id
        or ids.count(f.mailbox_id) > 1
        or not data.draw(st.booleans())
        else Folder(f.name + "-renamed", f.delimiter, mailbox_id=f.mailbox_id, status=f.status)
        for f in listed
    ]
    changes = match_listing(known, renamed)
    assert not changes.gone and not changes.added and not changes.reset
    assert len(changes.renamed) == sum(f.name.endswith("-renamed") for f in renamed)
