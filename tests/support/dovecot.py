"""The private Dovecot for tests: ``infrastructure.dovecot.DovecotServer`` rendered from
``tests/support/dovecot.conf.tmpl``.

Usage::

    with DovecotServer() as server:              # ~0.1 s to start
        user = server.add_user("u1", "pw")       # own uid (60000+N) and maildir
        server.deliver(user, [raw1, raw2])       # fast: maildir files (mtime = INTERNALDATE)
        server.imap_append(user, [raw3])         # through IMAP, like real delivery
        server.set_uidvalidity(user, 42)
        server.who(); server.process_titles()    # sessions, e.g. "dovecot/imap [u1 127.0.0.1 IDLE]"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infrastructure import dovecot as _dovecot
from infrastructure.dovecot import DovecotError, DovecotSession, DovecotUser, dovecot_available

TEMPLATE_PATH = Path(__file__).with_name("dovecot.conf.tmpl")

__all__ = [
    "TEMPLATE_PATH",
    "DovecotError",
    "DovecotServer",
    "DovecotSession",
    "DovecotUser",
    "dovecot_available",
]


class DovecotServer(_dovecot.DovecotServer):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("config_template", TEMPLATE_PATH.read_text())
        super().__init__(**kwargs)
