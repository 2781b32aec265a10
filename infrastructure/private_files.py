"""Files that hold tenants' data are the process owner's alone: 0600, directories 0700.

Modes are set explicitly after creation rather than left to the umask, so a permissive
umask (0000, 0002 under some service managers) cannot make a database, a blob or a key
readable by other local users. Directories that existed already are left as they are:
they may be shared on purpose (the current directory, /tmp).
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def make_private_dir(path: Path) -> None:
    """``mkdir -p`` where every directory created here is 0700."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:  # made by another process meanwhile
            continue
        os.chmod(directory, DIR_MODE)


def create_private_file(path: Path) -> bool:
    """Create ``path`` empty with mode 0600 if it is missing; answer whether it was."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return True
