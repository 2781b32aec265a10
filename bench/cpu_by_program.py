"""CPU seconds by program over a stretch of a benchmark: this process, its child servers
(the private Postfix and Dovecot, each by its process tree) and the PostgreSQL backends
serving this process's connections (matched by their client port in the process title).

The machine is shared and has few cores, so a rate is partly which side of a comparison
burns more CPU in all; this says where it goes. Linux only (``/proc``)."""

from __future__ import annotations

import contextlib
import os
import re
from collections import defaultdict
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
_PG_PORT = 5432


def _stat(pid: int | str) -> tuple[str, int, float] | None:
    """(command name, parent pid, CPU seconds with its reaped children's)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name, rest = raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(v) for v in rest[11:15])
    return name, int(rest[1]), (utime + stime + cutime + cstime) / _TICK


def _own_client_ports() -> set[int]:
    """Local ports of this process's TCP connections to PostgreSQL."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == _PG_PORT:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def snapshot() -> dict[str, float]:
    """CPU seconds so far of each program of interest, by name."""
    me = os.getpid()
    stats = {
        int(p.name): s for p in Path("/proc").iterdir() if p.name.isdigit() and (s := _stat(p.name))
    }
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    cpu: defaultdict[str, float] = defaultdict(float)
    own = Path("/proc/self/stat").read_text()
    fields = own[own.rindex(")") + 2 :].split()
    cpu["bench process"] = (int(fields[11]) + int(fields[12])) / _TICK
    for server in children.get(me, []):
        tree = stats[server][0]
        stack = [server]
        while stack:
            pid = stack.pop()
            stack += children.get(pid, [])
            name = stats[pid][0]
            cpu[f"{tree}/{name}" if name != tree else tree] += stats[pid][2]
    ports = _own_client_ports()
    for pid, (name, _, seconds) in stats.items():
        if name != "postgres":
            continue
        with contextlib.suppress(OSError):
            title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            port = re.search(r"\((\d+)\)", title)
            if port is not None and int(port.group(1)) in ports:
                cpu["postgres (our backends)"] += seconds
            elif "walwriter" in title:
                cpu["postgres walwriter (shared)"] += seconds
    return dict(cpu)


def add_spent(total: dict[str, float], before: dict[str, float], after: dict[str, float]) -> None:
    """Add to ``total`` the CPU seconds each program spent between two snapshots (a
    backend closed meanwhile is lost; pooled connections stay open)."""
    for name, seconds in after.items():
        total[name] = total.get(name, 0.0) + seconds - before.get(name, 0.0)
