"""The private server's processes on this host: a free loopback port, the greeting that
says it is up, and its whole process group ended at stop (the master alone would leave
its imap processes serving their clients)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def greets(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            return s.recv(64).startswith(b"* OK")
    except OSError:
        return False


def descendants(root_pid: int) -> Iterator[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            yield child
            stack.append(child)


def terminate_group(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    # The master exits leaving its sessions' processes (imap, log, stats) running,
    # reparented and still serving their clients: end its whole process group too,
    # as a service manager would, so stopping the server cuts every session.
    if signal_group(proc.pid, signal.SIGTERM):
        deadline = time.monotonic() + 2.0
        while group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        signal_group(proc.pid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. Exited sessions stay in the group as
    zombies until whoever adopted them reaps them (seconds, under some inits), and a
    signal still "reaches" a zombie: on Linux the group is read from /proc instead."""
    if not signal_group(pgid, 0):
        return False
    if not os.path.isdir("/proc"):
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def signal_group(pgid: int, signum: int) -> bool:
    """Signal a process group; False when none of its processes is left."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # not ours (the id was reused): leave it alone
        return False
    return True
