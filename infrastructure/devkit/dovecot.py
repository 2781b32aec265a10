"""A private Dovecot 2.3 IMAP server on loopback, for tests and the demo.

Lifecycle: ``DovecotServer()`` only chooses paths; ``start()`` writes the
configuration into a fresh short temp directory, runs ``dovecot -F -c CONF``
as a child process and waits for the IMAP greeting; ``stop()`` terminates the
master (which takes its children with it) and removes the directory.
``halt()`` / ``resume()`` (``restart()``) stop and start the processes on the same
port, configuration and mail, as clients see a server restart. Stopping ends the
master's whole process group: the master alone would leave its imap processes
serving their clients. The
server is also a context manager, and a finalizer stops it at interpreter exit
if nobody did.

Invariants:

- Everything lives under one temp dir (``/dev/shm/tdc-XXXX``, else ``/tmp/tdc-XXXX``):
  config, sockets (``run/``, kept short: Unix socket paths are capped at 108 bytes),
  state, log, passwd-file and every user's maildir. Instances run side by side.
  The files are throwaway, so they stay in memory where the machine has a tmpfs: on a
  disk filesystem, creating Dovecot's many short-lived files (uidlist locks, index
  rewrites) can cost the server more CPU than serving IMAP
  (docs/decisions/tmpfs-test-server.md).
- Listens on 127.0.0.1 only, without TLS; cleartext LOGIN, PLAIN and XOAUTH2
  (the token is checked against the passwd-file password) are accepted.
- Failed logins cost ~0.5 s and nothing more: the anvil auth penalty (growing
  delays for every later login from the same IP, i.e. from every client here)
  is switched off. Each user has a passwd-file of its own, because Dovecot
  notices a changed passwd-file only once a second.
- As root each user gets a uid of its own (60000 + N, no /etc/passwd entry),
  because Dovecot refuses uid 0 for mail processes and inotify instances are
  counted per uid; login and internal processes run as dovenull / dovecot.
  Without root every process and user runs as the current user.

Every user has the special-use folders Sent, Archive, Drafts, Junk and Trash (created
and subscribed when first listed or opened), so the server offers SPECIAL-USE;
``special_use=False`` starts one without them (folders are then found by their names).
``hide_capabilities`` starts a server that does not announce some capabilities
(``imap_capability``: the 2.3.19 list without them), e.g. CONDSTORE, QRESYNC, NOTIFY and
SPECIAL-USE, so the client's fallbacks meet a real server; the server still answers what
it hides if asked, which a client that checks capabilities never does.

Dovecot 2.3 configuration keys are used (Debian 12); 2.4 renamed many of them.
"""

from __future__ import annotations

import contextlib
import grp
import itertools
import os
import pwd
import re
import shutil
import string
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Self

from imapclient import IMAPClient

from infrastructure.devkit.dovecot_config import (
    DovecotError,
    capability_setting,
    default_config_template,
    special_use_mailboxes,
)
from infrastructure.devkit.processes import descendants, free_port, greets, terminate_group

FIRST_USER_UID = 60000
_READY_TIMEOUT = 10.0
_USER_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_IMAP_TITLE = re.compile(r"^\S*dovecot\S*/imap(?: \[|$)")


@dataclass(frozen=True, slots=True)
class DovecotUser:
    name: str
    password: str = field(repr=False)
    uid: int
    gid: int
    home: Path

    @property
    def maildir(self) -> Path:
        return self.home / "Maildir"


@dataclass(frozen=True, slots=True)
class DovecotSession:
    """One line of ``doveadm who``: a user's connections for one protocol."""

    user: str
    protocol: str
    connections: int
    pids: tuple[int, ...]


def dovecot_available(dovecot_bin: str = "dovecot") -> bool:
    return shutil.which(dovecot_bin) is not None


def _scratch_parent() -> str:
    """Where a server's throwaway files go: memory (tmpfs) if the machine offers it. Short
    paths, not $TMPDIR: the sockets' paths must fit in 108 bytes. (``mkdtemp`` makes a
    private directory inside, hence the noqa.)"""
    shm = "/dev/shm"  # noqa: S108
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return "/tmp"  # noqa: S108


class DovecotServer:
    host = "127.0.0.1"

    def __init__(
        self,
        *,
        config_template: str | None = None,
        extra_config: str = "",
        port: int | None = None,
        dovecot_bin: str = "dovecot",
        doveadm_bin: str = "doveadm",
        keep_dir: bool = False,
        hide_capabilities: Iterable[str] = (),
        special_use: bool = True,
    ) -> None:
        self._template = config_template or default_config_template()
        self._capability = capability_setting(hide_capabilities)
        self._mailboxes = special_use_mailboxes() if special_use else ""
        self._extra = extra_config
        self._requested_port = port
        self._dovecot = dovecot_bin
        self._doveadm = doveadm_bin
        self._keep_dir = keep_dir
        self._as_root = os.geteuid() == 0
        self._users: dict[str, DovecotUser] = {}
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., DovecotServer] | None = None
        self.root: Path | None = None
        self.port = 0

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def config_path(self) -> Path:
        return self._root() / "dovecot.conf"

    @property
    def log_path(self) -> Path:
        return self._root() / "dovecot.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = _READY_TIMEOUT) -> Self:
        if self.running:
            return self
        if shutil.which(self._dovecot) is None:
            raise DovecotError(f"{self._dovecot} not found on PATH")
        self.root = Path(tempfile.mkdtemp(prefix="tdc-", dir=_scratch_parent()))
        self.root.chmod(0o755)  # login/internal processes run as other users
        for sub in ("run", "state", "home"):
            (self.root / sub).mkdir(mode=0o755)
        # One passwd-file per user: Dovecot re-reads a changed passwd-file at most
        # once a second, so users added in one file would fail to log in at first.
        (self.root / "passwd.d").mkdir(mode=0o755)
        attempts = 1 if self._requested_port else 3
        for attempt in range(attempts):
            self.port = self._requested_port or free_port()
            self.config_path.write_text(self._render_config())
            try:
                self._spawn(timeout)
                return self
            except DovecotError:
                if attempt == attempts - 1 or "in use" not in self.log_text():
                    self.stop()
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._proc = None
        if self.root is not None and not self._keep_dir:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def halt(self) -> None:
        """Stop the server's processes (sessions are cut) but keep its directory, port,
        users and mail: ``resume`` starts it again, as a restarted server."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._proc = None

    def resume(self, timeout: float = _READY_TIMEOUT) -> Self:
        """Start a halted server again on the same port, configuration and mail."""
        if self.running:
            return self
        self._root()  # never started: nothing to resume
        self._spawn(timeout)
        return self

    def restart(self, timeout: float = _READY_TIMEOUT) -> Self:
        self.halt()
        return self.resume(timeout)

    def _spawn(self, timeout: float) -> None:
        log = open(self._root() / "stderr.log", "ab")  # noqa: SIM115 - handed to the child
        with log:
            self._proc = subprocess.Popen(  # noqa: S603 - fixed argv
                [self._dovecot, "-F", "-c", str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self._finalizer = weakref.finalize(self, terminate_group, self._proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._finalizer()
                raise DovecotError(f"dovecot exited at start: {self._startup_errors()}")
            if greets(self.host, self.port):
                return
            time.sleep(0.05)
        self._finalizer()
        raise DovecotError(f"dovecot not ready after {timeout}s: {self._startup_errors()}")

    def _render_config(self) -> str:
        if self._as_root:
            login_user, internal_user, internal_group = "dovenull", "dovecot", "dovecot"
            first_uid = FIRST_USER_UID
        else:
            me = pwd.getpwuid(os.getuid())
            login_user = internal_user = me.pw_name
            internal_group = grp.getgrgid(os.getgid()).gr_name
            first_uid = min(os.getuid(), 500)
        return string.Template(self._template).substitute(
            root=str(self._root()),
            port=self.port,
            login_user=login_user,
            internal_user=internal_user,
            internal_group=internal_group,
            first_valid_uid=first_uid,
            capability=self._capability,
            mailboxes=self._mailboxes,
            extra=self._extra,
        )

    # -- users and mail ----------------------------------------------------

    def add_user(self, name: str, password: str) -> DovecotUser:
        if not _USER_NAME.match(name) or ":" in password or "\n" in password:
            raise DovecotError("user names are [a-z0-9._-]; passwords hold no ':' or newline")
        with self._lock:
            if name in self._users:
                raise DovecotError(f"user {name} exists")
            n = len(self._users) + 1
            uid = gid = FIRST_USER_UID + n if self._as_root else os.getuid()
            if not self._as_root:
                gid = os.getgid()
            home = self._root() / "home" / name
            user = DovecotUser(name=name, password=password, uid=uid, gid=gid, home=home)
            for sub in ("", "Maildir", "Maildir/cur", "Maildir/new", "Maildir/tmp"):
                path = home / sub
                path.mkdir(mode=0o700)
                os.chown(path, uid, gid)
            entry = self._root() / "passwd.d" / name
            entry.write_text(f"{name}:{{PLAIN}}{password}:{uid}:{gid}::{home}::\n")
            entry.chmod(0o644)
            self._users[name] = user
            return user

    def user(self, name: str) -> DovecotUser:
        return self._users[name]

    def deliver(
        self,
        user: DovecotUser | str,
        messages: Iterable[bytes],
        *,
        internal_date: datetime | float | None = None,
        seen: bool = False,
        folder: str = "INBOX",
    ) -> int:
        """Write messages straight into the user's maildir (``folder``: another folder
        of plain ASCII name, made by IMAP CREATE first); return how many.

        Fast (thousands per second). Dovecot assigns UIDs, in file-name order,
        when a session next syncs the mailbox (or on ``index``). The file's
        mtime becomes INTERNALDATE. Line endings are written as given: use CRLF
        so RFC822.SIZE equals the file size.
        """
        u = self._users[user] if isinstance(user, str) else user
        root = u.maildir if folder == "INBOX" else u.maildir / f".{folder}"  # Maildir++
        stamp = _epoch(internal_date)
        count = 0
        for raw in messages:
            n = next(self._counter)
            base = f"{int(time.time())}.M{n:09d}P{os.getpid()}.tidings,S={len(raw)}"
            tmp = root / "tmp" / base
            tmp.write_bytes(raw)
            os.chown(tmp, u.uid, u.gid)
            tmp.chmod(0o600)
            os.utime(tmp, (stamp, stamp))
            dest = root / "cur" / f"{base}:2,S" if seen else root / "new" / base
            os.rename(tmp, dest)
            count += 1
        return count

    def imap_append(
        self,
        user: DovecotUser | str,
        messages: Iterable[bytes],
        *,
        internal_date: datetime | None = None,
        seen: bool = False,
        batch: int = 200,
    ) -> int:
        """APPEND through IMAP (MULTIAPPEND, in batches): the path a real MTA's mail takes
        into the index, so IDLE sessions hear about it at once."""
        u = self._users[user] if isinstance(user, str) else user
        flags = (b"\\Seen",) if seen else ()
        pending = list(messages)
        with IMAPClient(self.host, self.port, ssl=False, timeout=30) as client:
            client.login(u.name, u.password)
            for start in range(0, len(pending), batch):
                items: list[dict[str, object]] = []
                for m in pending[start : start + batch]:
                    item: dict[str, object] = {"msg": m, "flags": flags}
                    if internal_date is not None:
                        item["date"] = internal_date
                    items.append(item)
                client.multiappend("INBOX", items)
        return len(pending)

    def index(self, user: DovecotUser | str) -> dict[str, int]:
        """Make Dovecot pick up freshly delivered files (assigns UIDs)."""
        return self.mailbox_status(user)

    def mailbox_status(self, user: DovecotUser | str, mailbox: str = "INBOX") -> dict[str, int]:
        name = user if isinstance(user, str) else user.name
        out = self.doveadm(
            "-f",
            "flow",
            "mailbox",
            "status",
            "-u",
            name,
            "messages uidnext uidvalidity highestmodseq",
            mailbox,
        )
        values: dict[str, int] = {}
        for pair in out.split():
            key, _, value = pair.partition("=")
            if value.isdigit():
                values[key] = int(value)
        return values

    def set_uidvalidity(self, user: DovecotUser | str, value: int, mailbox: str = "INBOX") -> None:
        name = user if isinstance(user, str) else user.name
        self.doveadm("mailbox", "update", "-u", name, "--uid-validity", str(value), mailbox)

    # -- observing sessions ------------------------------------------------

    def who(self) -> list[DovecotSession]:
        """Sessions as the server's anvil counts them (``doveadm who``)."""
        sessions = []
        for line in self.doveadm("who").splitlines()[1:]:
            parts = line.split()
            if len(parts) < 4 or not parts[1].isdigit():
                continue
            pids = tuple(int(p) for p in re.findall(r"\d+", " ".join(parts[3:]).split(")")[0]))
            sessions.append(DovecotSession(parts[0], parts[2], int(parts[1]), pids))
        return sessions

    def process_titles(self) -> list[str]:
        """Titles of this instance's imap processes, e.g. ``dovecot/imap [u1 127.0.0.1 IDLE]``."""
        return sorted(self.imap_processes().values())

    def imap_processes(self) -> dict[int, str]:
        """This instance's imap processes: pid -> title (one process per session)."""
        if self._proc is None:
            return {}
        titles = {}
        for pid in descendants(self._proc.pid):
            with contextlib.suppress(OSError):
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                title = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
                if _IMAP_TITLE.search(title):
                    titles[pid] = title
        return titles

    # -- plumbing ----------------------------------------------------------

    def doveadm(self, *args: str) -> str:
        result = subprocess.run(  # noqa: S603 - fixed binary, no shell
            [self._doveadm, "-c", str(self.config_path), *args],
            capture_output=True,
            check=False,
            timeout=30,
        )
        if result.returncode != 0:
            err = result.stderr.decode("utf-8", "replace").strip()
            raise DovecotError(f"doveadm {args[0]} failed ({result.returncode}): {err}")
        return result.stdout.decode("utf-8", "replace")

    def log_text(self) -> str:
        parts = []
        for name in ("stderr.log", "dovecot.log"):
            with contextlib.suppress(OSError):
                parts.append((self._root() / name).read_text(errors="replace"))
        return "\n".join(parts)

    def _startup_errors(self) -> str:
        lines = [ln for ln in self.log_text().splitlines() if "rror" in ln or "atal" in ln]
        return " | ".join(lines[-5:]) or "no error in the log"

    def _root(self) -> Path:
        if self.root is None:
            raise DovecotError("server not started")
        return self.root


def _epoch(when: datetime | float | None) -> float:
    if when is None:
        return time.time()
    if isinstance(when, datetime):
        return when.timestamp()
    return float(when)
