from __future__ import annotations

import pytest

from application.api_keys import keys


def test_a_new_key_splits_back_into_its_id_and_secret() -> None:
    new = keys.new_key()
    assert keys.split(new.text) == (new.key_id, new.secret)
    assert keys.matches(new.secret, keys.digest(new.secret))
    assert not keys.matches(new.secret + "x", keys.digest(new.secret))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "tdk_",
        "Bearer tdk_x",
        "tdk_" + "0" * 32 + "_" + "a" * 42,  # secret one short
        "tdk_" + "G" * 32 + "_" + "a" * 43,  # not hex
        "tdk_" + "0" * 32 + "_" + "a" * 43 + "\n",
        "tdk_" + "0" * 32 + "_" + "a" * 42 + "\ud800",
        "x" * 100_000,
    ],
)
def test_anything_not_shaped_like_a_key_is_refused_without_a_lookup(text: str) -> None:
    assert keys.split(text) is None


def test_key_ids_in_payloads_parse_or_are_none() -> None:
    assert keys.parse_key_id("not-a-uuid") is None
    new = keys.new_key()
    assert keys.parse_key_id(str(new.key_id)) == new.key_id
