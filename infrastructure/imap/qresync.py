"""``EXAMINE folder (QRESYNC (uidvalidity modseq))`` and its answer (``resync``), and
``VANISHED (EARLIER)`` parsed (``parse_vanished``). imapclient neither sends the
parameter nor reads VANISHED, so the command goes through imaplib's own tagged
exchange, as ``flags.fetch_flag_lines`` does, under the session's wire limits (a
response past the cap fails this account's operation). Its untagged data is read the
way ``Pager.select`` reads an EXAMINE's, every number range-checked, and the FETCH lines
by ``flag_response``. Rules of belief: ``application.mail.resync``.
"""

from __future__ import annotations

import imaplib
import re
from typing import Any

from application.mail.ports import MailboxAnswerTooLarge, MailboxStatus, MailboxTransientError
from application.mail.resync import MAX_RANGES, Resynced, UidRanges
from infrastructure.imap.connection import Connection
from infrastructure.imap.flag_response import parse_flag_lines
from infrastructure.imap.identity import ID_MAX, MODSEQ_MAX, valid_id
from infrastructure.imap.wire import too_large

_VANISHED = re.compile(rb"\(EARLIER\) ([0-9:,]+)\Z")
_NUMBER = re.compile(rb"[0-9]{1,20}\Z")


def resync(conn: Connection, folder: str, uidvalidity: int, modseq: int) -> Resynced:
    """The QRESYNC EXAMINE of ``folder`` on a session that ENABLEd QRESYNC."""
    untagged = conn.io(_answer, conn.client, folder, uidvalidity, modseq)
    status = _status(conn, untagged)
    read = parse_flag_lines(untagged.get("FETCH", []))
    flags = {uid: e.flags for uid, e in read.entries.items()}
    stale = any(e.modseq is not None and e.modseq <= modseq for e in read.entries.values())
    vanished = parse_vanished(untagged.get("VANISHED", []), status.uidnext)
    if _last_int(untagged, "EXISTS") is None:
        vanished = None  # no count to check the answer against
    if vanished is not None and any(uid in vanished for uid in flags):
        vanished = None  # gone and changed at once: the answer is not believed
    return Resynced(status, vanished, flags, stale, read.unread)


def parse_vanished(lines: list[Any], uidnext: int | None) -> UidRanges | None:
    """The UIDs of ``* VANISHED (EARLIER) set`` lines; None when a line is malformed,
    names a UID at or past ``uidnext`` (or UIDNEXT is unknown), or the ranges number
    more than ``MAX_RANGES``."""
    if uidnext is None:
        return None
    ranges: list[tuple[int, int]] = []
    for line in lines:
        m = _VANISHED.match(line) if type(line) is bytes else None
        if m is None:
            return None
        for part in m[1].split(b","):
            bounds = part.split(b":")
            if len(bounds) > 2 or not all(_NUMBER.match(b) for b in bounds):
                return None
            numbers = [int(b) for b in bounds]
            lo, hi = min(numbers), max(numbers)
            if not (valid_id(lo) and valid_id(hi)) or hi >= uidnext:
                return None
            ranges.append((lo, hi))
            if len(ranges) > MAX_RANGES:
                return None
    return UidRanges.of(ranges)


def _answer(client: Any, folder: str, uidvalidity: int, modseq: int) -> dict[str, list[Any]]:
    """The EXAMINE's untagged data; an answer past the reader's limits (a VANISHED line
    past 1 MB from a server that ignored the bound asked) is ``MailboxAnswerTooLarge``."""
    try:
        return _examine(client, folder, uidvalidity, modseq)
    except (OSError, imaplib.IMAP4.error) as exc:
        if too_large(exc):
            raise MailboxAnswerTooLarge("the QRESYNC answer passed what is read") from None
        raise


def _examine(client: Any, folder: str, uidvalidity: int, modseq: int) -> dict[str, list[Any]]:
    imap = client._imap
    imap.untagged_responses.clear()  # as imaplib's own SELECT does: earlier news is not this
    name = client._normalise_folder(folder)
    tag = imap._command("EXAMINE", name, f"(QRESYNC ({uidvalidity} {modseq}))".encode())
    typ, data = imap._command_complete("EXAMINE", tag)
    client._checkok("examine", typ, data)
    imap.state, imap.is_readonly = "SELECTED", True
    untagged: dict[str, list[Any]] = dict(imap.untagged_responses)
    imap.untagged_responses.clear()
    return untagged


def _last_int(untagged: dict[str, list[Any]], key: str) -> int | None:
    values = untagged.get(key) or []
    raw = values[-1] if values else None
    if type(raw) is not bytes or not _NUMBER.match(raw):
        return None
    return int(raw)


def _status(conn: Connection, untagged: dict[str, list[Any]]) -> MailboxStatus:
    uidvalidity = _last_int(untagged, "UIDVALIDITY")
    if uidvalidity is None or not valid_id(uidvalidity):
        raise conn.fail(MailboxTransientError("EXAMINE gave no usable UIDVALIDITY"))
    uidnext = _last_int(untagged, "UIDNEXT")
    modseq = _last_int(untagged, "HIGHESTMODSEQ")
    exists = _last_int(untagged, "EXISTS")
    return MailboxStatus(
        uidvalidity=uidvalidity,
        uidnext=uidnext if uidnext is not None and 1 <= uidnext <= ID_MAX + 1 else None,
        highestmodseq=modseq if modseq is not None and 0 < modseq <= MODSEQ_MAX else None,
        exists=exists if exists is not None and 0 <= exists <= ID_MAX else 0,
    )
