"""The private Dovecot's configuration lines (no server is started): special-use folders,
and capabilities hidden on request."""

from __future__ import annotations

import pytest

from infrastructure.devkit.dovecot import DovecotServer
from infrastructure.devkit.dovecot_config import (
    CAPABILITIES_2_3,
    SPECIAL_USE_FOLDERS,
    DovecotError,
    capability_setting,
    default_config_template,
    special_use_mailboxes,
)


def test_the_template_takes_the_special_use_folders_and_the_capability_line() -> None:
    template = default_config_template()
    assert "$mailboxes" in template and "$capability" in template
    blocks = special_use_mailboxes()
    for name in SPECIAL_USE_FOLDERS:
        assert f"  mailbox {name} {{\n    special_use = \\{name}\n    auto = subscribe\n" in blocks


def test_nothing_is_hidden_by_default() -> None:
    assert capability_setting(()) == ""


def test_hidden_capabilities_are_left_out_of_imap_capability() -> None:
    line = capability_setting(["condstore", "SPECIAL-USE"])
    announced = line.removeprefix("imap_capability = ").split()
    assert "CONDSTORE" not in announced and "SPECIAL-USE" not in announced
    assert len(announced) == len(CAPABILITIES_2_3) - 2 and "QRESYNC" in announced


def test_hiding_what_the_server_never_announces_is_refused() -> None:
    with pytest.raises(DovecotError):
        DovecotServer(hide_capabilities=["XYZZY"])
