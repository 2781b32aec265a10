"""Whether a folder a listing left out is still on the server: ``STATUS name
(UIDVALIDITY)``, one bounded exchange per folder (``Connection.io``: its own deadline).

- ``OK``: the folder is there (the listing lied or was cut short).
- ``NO`` with no response code, ``[NONEXISTENT]`` (Dovecot, RFC 5530), ``[TRYCREATE]``
  or ``[NOPERM]`` (the user may no longer read it): gone. Cyrus answers ``NO Mailbox
  does not exist`` (checked in the Cyrus tests).
- ``NO`` with any other code (``[UNAVAILABLE]``, ``[SERVERBUG]``, ``[INUSE]`` ...) or a
  throttling text, ``BAD``, a timeout or a dropped connection: raised as the port's
  error, so nothing is decided.
"""

from __future__ import annotations

import imaplib
import re

from application.mail.ports import MailboxAuthError, MailboxThrottled, MailboxTransientError
from infrastructure.imap import wire
from infrastructure.imap.connection import Connection
from infrastructure.imap.errors import classify

_CODE = re.compile(rb"\A\s*\[([A-Za-z-]{1,40})")
GONE_CODES = frozenset({b"NONEXISTENT", b"TRYCREATE", b"NOPERM"})
MAX_TEXT = 1024  # of the answer's text looked at


def folder_exists(conn: Connection, folder: str) -> bool:
    """True: the server has ``folder``; False: it says it has not (see above)."""
    typ, data = conn.io(wire.status_answer, conn.client, folder, b"(UIDVALIDITY)")
    if typ == "OK":
        return True
    text = b" ".join(d for d in data if type(d) is bytes)[:MAX_TEXT]
    code = _CODE.match(text)
    refused = classify(imaplib.IMAP4.error(text.decode("utf-8", "replace")))
    said = isinstance(refused, MailboxThrottled | MailboxAuthError)  # throttled, not gone
    if typ == "NO" and not said and (code is None or code[1].upper() in GONE_CODES):
        return False
    if said:
        raise conn.fail(refused)
    raise conn.fail(MailboxTransientError("STATUS of a folder the listing left out refused"))
