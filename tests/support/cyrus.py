"""A private Cyrus IMAP 3.6 on loopback, for tests (docs/cyrus.md).

Debian's ``cyrus-imapd`` conflicts with the installed ``dovecot-imapd``, so it is never
installed: ``cyrus_root()`` fetches the packages with ``apt-get download`` (Debian's
package registry only) and unpacks them with ``dpkg -x`` into a cache directory, once per
machine, then checks with ``ldd`` that every library the server needs resolves.

Lifecycle: ``CyrusServer()`` only chooses paths; ``start()`` writes ``imapd.conf`` and
``cyrus.conf`` into a fresh temp dir, runs ``master -D`` (imapd on 127.0.0.1, idled for
IDLE push) in a process group of its own and waits for the greeting; ``stop()`` ends the
whole group and removes the directory.

Invariants:

- Everything lives under one temp dir (``/dev/shm/tcy-XXXX``, else ``/tmp``): config,
  sockets, the mailbox database, the mail spool. Instances run side by side.
- Listens on 127.0.0.1 only, without TLS; plaintext LOGIN and AUTHENTICATE PLAIN. The
  password check is SASL's ``alwaystrue`` (any password is accepted): the test users
  exist as mailboxes, not as accounts, and no test here is about a wrong password.
- As root the processes run as ``nobody`` (Cyrus refuses to run as root); otherwise as
  the current user. ``admin`` is the IMAP administrator that creates users.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Self

from imapclient import IMAPClient

from infrastructure.devkit.debs import unpack_once
from infrastructure.devkit.processes import free_port, greets, terminate_group

PACKAGES = ("cyrus-common", "cyrus-imapd", "libical3", "libpcre3", "libxapian30")
BINARIES = ("master", "imapd", "idled", "ctl_cyrusdb")
ADMIN = "admin"
_CACHE = Path(os.environ.get("TIDINGS_CYRUS_ROOT", "/var/tmp/tidings-cyrus-3.6"))
_READY_TIMEOUT = 15.0


class CyrusError(RuntimeError):
    pass


def _library_path(root: Path) -> str:
    dirs = sorted({str(p.parent) for p in root.rglob("*.so*")})
    return ":".join(dirs)


def _unresolved(root: Path) -> list[str]:
    env = {**os.environ, "LD_LIBRARY_PATH": _library_path(root)}
    missing: list[str] = []
    for name in BINARIES:
        out = subprocess.run(
            ["ldd", str(root / "usr/lib/cyrus/bin" / name)],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=False,
        ).stdout
        missing += [f"{name}: {line.strip()}" for line in out.splitlines() if "not found" in line]
    return missing


def cyrus_root(cache: Path = _CACHE) -> Path:
    """The unpacked packages (downloaded once); raises ``CyrusError`` when impossible."""
    if (cache / "usr/lib/cyrus/bin/master").exists():
        return cache
    return unpack_once(cache, PACKAGES, CyrusError, _resolved)


def _resolved(unpacked: Path) -> None:
    missing = _unresolved(unpacked)
    if missing:
        raise CyrusError("libraries not found: " + "; ".join(missing))


def _run_as() -> str:
    return "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


IMAPD_CONF = """\
configdirectory: {d}/conf
defaultpartition: default
partition-default: {d}/spool
admins: {admin}
cyrus_user: {user}
sasl_pwcheck_method: alwaystrue
sasl_mech_list: PLAIN LOGIN
allowplaintext: yes
virtdomains: off
unixhierarchysep: yes
altnamespace: yes
syslog_prefix: tcy
idlesocket: {d}/conf/socket/idle
notifysocket: {d}/conf/socket/notify
lmtpsocket: {d}/conf/socket/lmtp
mboxname_lockpath: {d}/conf/lock
"""

CYRUS_CONF = """\
START {{
  recover cmd="{bin}/ctl_cyrusdb -C {conf} -r"
}}
SERVICES {{
  imap cmd="{bin}/imapd -C {conf}" listen="127.0.0.1:{port}" prefork=0
}}
EVENTS {{
}}
DAEMON {{
  idled cmd="{bin}/idled -C {conf}"
}}
"""


def _cleanup(proc: subprocess.Popen[bytes], directory: Path) -> None:
    terminate_group(proc)
    shutil.rmtree(directory, ignore_errors=True)


class CyrusServer:
    def __init__(self, *, root: Path | None = None) -> None:
        self.root = root
        self.host = "127.0.0.1"
        self.port = 0
        self.dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[..., CyrusServer] | None = None

    def start(self) -> None:
        root = self.root or cyrus_root()
        self.root = root
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        d = Path(tempfile.mkdtemp(prefix="tcy-", dir=base))
        self.dir = d
        for sub in ("conf/socket", "conf/lock", "spool"):
            (d / sub).mkdir(parents=True)
        conf = d / "imapd.conf"
        conf.write_text(IMAPD_CONF.format(d=d, admin=ADMIN, user=_run_as()))
        self.port = free_port()
        bindir = root / "usr/lib/cyrus/bin"
        (d / "cyrus.conf").write_text(CYRUS_CONF.format(bin=bindir, conf=conf, port=self.port))
        os.chmod(d, 0o755)
        if os.geteuid() == 0:
            entry = pwd.getpwnam("nobody")
            for path in (d, *d.rglob("*")):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        env = {**os.environ, "LD_LIBRARY_PATH": _library_path(root)}
        self._proc = subprocess.Popen(
            [
                str(bindir / "master"),
                "-D",
                "-C",
                str(conf),
                "-M",
                str(d / "cyrus.conf"),
                "-p",
                str(d / "master.pid"),
            ],
            cwd=d,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        # A test process that dies without stop() must not leave Cyrus serving.
        self._finalizer = weakref.finalize(self, _cleanup, self._proc, d)
        deadline = time.monotonic() + _READY_TIMEOUT
        while not greets(self.host, self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise CyrusError("Cyrus master did not start (it logs to syslog only)")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._finalizer, self._proc, self.dir = None, None, None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def client(self, user: str) -> IMAPClient:
        """A logged-in IMAP client (any password passes: ``alwaystrue``)."""
        client = IMAPClient(self.host, self.port, ssl=False, timeout=30)
        client.login(user, "secret")
        return client

    def add_user(self, name: str, folders: Iterable[tuple[str, str]] = ()) -> str:
        """Creates the user's INBOX as admin, then ``folders`` as (name, special-use)."""
        with self.client(ADMIN) as admin:
            admin.create_folder(f"user/{name}")
        if folders:
            with self.client(name) as client:
                for folder, use in folders:
                    # CREATE-SPECIAL-USE (RFC 6154): imapclient has no argument for it.
                    client._imap._simple_command(
                        "CREATE", client._normalise_folder(folder), f"(USE ({use}))"
                    )
        return name

    def append(self, user: str, messages: Iterable[bytes], folder: str = "INBOX") -> list[int]:
        """APPENDs as the user; returns the new UIDs (UIDPLUS)."""
        uids: list[int] = []
        with self.client(user) as client:
            for raw in messages:
                answer = client.append(folder, raw)
                uids.append(int(answer.split(b"]")[0].split()[-1]))
        return uids
