"""Debian packages downloaded and unpacked into a private directory, never installed
(the test servers whose packages conflict with what the machine has: Cyrus, Postfix)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path


def unpack_once(
    cache: Path,
    packages: Sequence[str],
    error: type[Exception],
    check: Callable[[Path], None] = lambda _: None,
) -> Path:
    """``apt-get download`` + ``dpkg -x`` of ``packages`` into ``cache`` (the caller has
    seen it is not there yet); ``check`` may refuse the unpacked tree before it is kept.
    Raises ``error`` when the download fails."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)  # noqa: S103 - apt's download user must write here
        got = subprocess.run(  # noqa: S603 - fixed argv
            ["apt-get", "download", *packages],  # noqa: S607 - apt-get from PATH
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        debs = sorted(work.glob("*.deb"))
        if got.returncode != 0 or len(debs) != len(packages):
            raise error(f"apt-get download {' '.join(packages)} failed: {got.stderr[-800:]}")
        unpacked = work / "root"
        for deb in debs:
            subprocess.run(  # noqa: S603 - fixed argv
                ["dpkg", "-x", str(deb), str(unpacked)],  # noqa: S607 - dpkg from PATH
                check=True,
                timeout=120,
            )
        check(unpacked)
        with contextlib.suppress(FileExistsError, OSError):
            unpacked.rename(cache)  # another process may have won the race: same content
    return cache
