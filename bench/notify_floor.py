"""Does NOTIFY slow Dovecot's own IDLE push? New mail in INBOX, sessions with and without
NOTIFY set, side by side in one burst.

    python bench/notify_floor.py [--accounts 200] [--rounds 4]

N Dovecot users, each with one bare session (raw socket) in IDLE on INBOX; in each round
half of them (alternating from round to round) first sent the watch's ``NOTIFY SET``
(INBOX selected, the five special-use folders besides). One message is delivered to
every mailbox at once (renames from ``tmp/`` into ``new/``) and the time until each
session reads EXISTS is taken. Both halves share the burst, the machine and the server,
so their difference is NOTIFY's alone. Goal: the NOTIFY half's median within 10 ms of
the plain half's.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import median, percentile, say
from bench._mail import mail, private_dovecot, raise_inotify, stage
from infrastructure.devkit.dovecot import DovecotServer, DovecotUser
from infrastructure.imap.notify import notify_command

FOLDERS = ("Sent", "Archive", "Drafts", "Junk", "Trash")


def idle_session(server: DovecotServer, box: DovecotUser, *, notify: bool) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=30)
    lines = sock.makefile("rb")
    lines.readline()  # the greeting
    commands = [f"LOGIN {box.name} {box.password}".encode(), b'LIST "" "*"', b"EXAMINE INBOX"]
    if notify:
        commands.append(notify_command(FOLDERS))
    for n, command in enumerate(commands):
        tag = b"t%d" % n
        sock.sendall(tag + b" " + command + b"\r\n")
        while not (line := lines.readline()).startswith(tag + b" "):
            if not line:
                raise RuntimeError("the server hung up")
        if not line.startswith(tag + b" OK"):
            raise RuntimeError(f"{command[:12]!r} refused")
    sock.sendall(b"i IDLE\r\n")
    if not lines.readline().startswith(b"+"):
        raise RuntimeError("IDLE refused")
    sock.setblocking(False)
    return sock


def burst(server: DovecotServer, boxes: list[DovecotUser], round_: int) -> dict[bool, list[float]]:
    """One round: seconds until EXISTS per session, by whether NOTIFY was set."""
    sessions = {
        idle_session(server, box, notify=(i + round_) % 2 == 0): (i + round_) % 2 == 0
        for i, box in enumerate(boxes)
    }
    time.sleep(1.0)  # every session settled in IDLE
    staged = [stage(box, mail(i, f"notify floor {round_}"), i) for i, box in enumerate(boxes)]
    seen: dict[bool, list[float]] = {True: [], False: []}
    with selectors.DefaultSelector() as selector:
        for sock, notify in sessions.items():
            selector.register(sock, selectors.EVENT_READ, notify)
        started = time.perf_counter()
        for tmp, new in staged:
            os.rename(tmp, new)
        waiting = len(sessions)
        while waiting and time.perf_counter() - started < 30:
            for key, _ in selector.select(1.0):
                ready = key.fileobj
                if isinstance(ready, socket.socket) and b"EXISTS" in ready.recv(65536):
                    seen[key.data].append(time.perf_counter() - started)
                    selector.unregister(ready)
                    waiting -= 1
    for sock in sessions:
        sock.close()
    if waiting:
        raise RuntimeError(f"{waiting} sessions heard no EXISTS within 30 s")
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--accounts", type=int, default=200, help="mailboxes (200)")
    parser.add_argument("--rounds", type=int, default=4, help="bursts (4)")
    args = parser.parse_args(argv)
    raise_inotify(max(1024, args.accounts + 256))
    times: dict[bool, list[float]] = {True: [], False: []}
    with private_dovecot(sessions=args.accounts + 50) as server:
        boxes = [server.add_user(f"n{i:05d}", f"pw{i:05d}") for i in range(args.accounts)]
        for round_ in range(args.rounds):
            for notify, seconds in burst(server, boxes, round_).items():
                times[notify] += seconds
            time.sleep(1.0)
    for notify, label in ((False, "plain IDLE"), (True, "IDLE + NOTIFY")):
        t = times[notify]
        say(
            f"{label:14} n={len(t)} median {median(t) * 1000:.0f} ms, "
            f"p90 {percentile(t, 90) * 1000:.0f} ms, max {max(t) * 1000:.0f} ms"
        )
    gap = (median(times[True]) - median(times[False])) * 1000
    say(f"NOTIFY - plain, median: {gap:+.1f} ms (goal: <= +10 ms)")
    return 0 if gap <= 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
