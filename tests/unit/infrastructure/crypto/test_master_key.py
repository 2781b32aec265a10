"""Master key parsing and fingerprints: the forms refused, and a fingerprint that
depends on the key without revealing it."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from infrastructure.crypto.master_key import (
    MasterKeyMalformed,
    MasterKeyMissing,
    decode_key,
    fingerprint,
    load_master_key,
)


def test_a_key_is_the_base64_of_32_bytes() -> None:
    raw = os.urandom(32)
    assert decode_key(base64.b64encode(raw).decode(), "TIDINGS_MASTER_KEY") == raw


@pytest.mark.parametrize(
    "text", ["", "abc", "!!!!", base64.b64encode(bytes(range(31))).decode(), "QUJD\nREVG"]
)
def test_other_forms_name_the_source_and_the_expected_form(text: str) -> None:
    with pytest.raises(MasterKeyMalformed, match="TIDINGS_MASTER_KEY must be the base64"):
        decode_key(text, "TIDINGS_MASTER_KEY")


def test_fingerprints_differ_per_key_and_do_not_contain_it() -> None:
    one, two = os.urandom(32), os.urandom(32)
    assert fingerprint(one) == fingerprint(one) != fingerprint(two)
    assert one.hex() not in fingerprint(one)


def test_a_key_file_is_generated_only_when_allowed(tmp_path: Path) -> None:
    with pytest.raises(MasterKeyMissing, match=str(tmp_path / "master.key")):
        load_master_key(None, tmp_path, may_generate=False)
    assert not (tmp_path / "master.key").exists()
    key = load_master_key(None, tmp_path / "data", may_generate=True)
    assert load_master_key(None, tmp_path / "data", may_generate=False) == key
