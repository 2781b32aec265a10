"""A stopped server's process group counts as gone once only zombies are left in it."""

from __future__ import annotations

import subprocess
import sys
import time

from infrastructure.devkit.processes import group_alive


def test_a_running_group_is_alive_and_a_zombie_group_is_not() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        assert group_alive(child.pid)
        child.terminate()
        # Not reaped yet: the group's only process is a zombie, which kill(0) still finds.
        deadline = time.monotonic() + 5
        while _state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child.pid) == "Z"
        assert not group_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not group_alive(child.pid)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0].decode()
