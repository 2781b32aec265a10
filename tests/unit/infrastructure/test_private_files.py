"""Private files and directories keep their modes under any umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from infrastructure.private_files import create_private_file, make_private_dir


@pytest.fixture(params=[0o000, 0o022, 0o077])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_directories_are_0700_and_existing_ones_untouched(tmp_path: Path, umask: int) -> None:
    os.chmod(tmp_path, 0o755)
    make_private_dir(tmp_path / "a" / "b" / "c")
    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3
    assert mode(tmp_path) == 0o755
    make_private_dir(tmp_path / "a" / "b")  # exists: nothing to do


def test_a_new_file_is_0600_and_an_existing_one_is_left(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "db"
    assert create_private_file(path) is True
    assert mode(path) == 0o600
    path.write_bytes(b"data")
    assert create_private_file(path) is False
    assert path.read_bytes() == b"data"
