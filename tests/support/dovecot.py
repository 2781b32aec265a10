"""The private Dovecot for tests: ``infrastructure.devkit.dovecot.DovecotServer`` with the
tests' extra configuration lines (``auth_verbose``, so failed logins explain themselves).

Usage::

    with DovecotServer() as server:              # ~0.1 s to start
        user = server.add_user("u1", "pw")       # own uid (60000+N) and maildir
        server.deliver(user, [raw1, raw2])       # fast: maildir files (mtime = INTERNALDATE)
        server.imap_append(user, [raw3])         # through IMAP, like real delivery
        server.set_uidvalidity(user, 42)
        server.who(); server.process_titles()    # sessions, e.g. "dovecot/imap [u1 127.0.0.1 IDLE]"

Leaving the ``with`` block stops the server in the background (``tests.support.later``):
its master takes about a second to exit on SIGTERM and the wait for its process group
another one or two, time the next test need not wait for (each server has its own port
and directory). ``stop()``, ``halt()`` and ``restart()`` called by a test still return
once the server is down.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from infrastructure.devkit import dovecot as _dovecot
from infrastructure.devkit.dovecot import DovecotSession, DovecotUser, dovecot_available
from infrastructure.devkit.dovecot_config import DovecotError
from tests.support.later import later

TEST_CONFIG = "auth_verbose = yes\n"

__all__ = [
    "TEST_CONFIG",
    "DovecotError",
    "DovecotServer",
    "DovecotSession",
    "DovecotUser",
    "dovecot_available",
]


class DovecotServer(_dovecot.DovecotServer):
    def __init__(self, *, extra_config: str = "", **kwargs: Any) -> None:
        super().__init__(extra_config=TEST_CONFIG + extra_config, **kwargs)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        later(self.stop)
