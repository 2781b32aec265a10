"""Keep imapclient's own log records free of addresses and secrets.

imapclient logs the login name at DEBUG ("Logged in as %s") and, through its
``imapclient.imaplib`` adapter, raw protocol lines. ``install_redaction`` adds a
filter to both loggers (once per process) that replaces the login name and drops
protocol lines that could carry message text.
"""

from __future__ import annotations

import logging
import threading

_LOCK = threading.Lock()
_installed = False
_LOGGERS = ("imapclient.imapclient", "imapclient.imaplib", "imapclient.util")


class _RedactFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "imapclient.imaplib":
            return False
        if isinstance(record.msg, str) and record.msg.startswith("Logged in as"):
            record.msg = "Logged in"
            record.args = ()
        return True


def install_redaction() -> None:
    global _installed  # noqa: PLW0603 - a process-wide, idempotent switch
    with _LOCK:
        if _installed:
            return
        flt = _RedactFilter()
        for name in _LOGGERS:
            logging.getLogger(name).addFilter(flt)
        _installed = True
