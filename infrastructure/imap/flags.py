"""Reading a selected folder's flags on a session (``read_flags``): CONDSTORE's
``CHANGEDSINCE`` where the server offers it and its answers are believed, every message
once to set a baseline, else the bounded window. The capability is checked before the
round trip; the rules are ``application.mail.flag_state``'s, the parsing
``flag_response``'s. ``UID FETCH`` by UID goes in spans of ``search_span`` UIDs
(``uid_spans``), so one answer stays well under the response cap however large the
mailbox (a hostile server's answer past the cap fails its own account only).
"""

from __future__ import annotations

from typing import Any

from application.mail.flag_state import FlagCursor, FlagRead, FlagWindow
from application.mail.ports import MailboxStatus
from infrastructure.imap.connection import Connection
from infrastructure.imap.flag_response import FlagEntry, parse_flag_lines, window_ranges


def read_flags(
    conn: Connection,
    capabilities: frozenset[str],
    status: MailboxStatus,
    cursor: FlagCursor | None,
    window: FlagWindow,
) -> FlagRead:
    """The flags of the folder ``status`` was read from (EXAMINEd just before)."""
    same = cursor is not None and cursor.uidvalidity == status.uidvalidity
    sweep_from = cursor.sweep_from if cursor is not None and same else 1
    modseq = status.highestmodseq
    condstore = "CONDSTORE" in capabilities and modseq is not None
    if condstore and same and cursor is not None and not cursor.unreliable:
        known = cursor.modseq
        if known is not None and known == modseq:
            return FlagRead(status.uidvalidity, modseq, "unchanged", sweep_from=sweep_from)
        if known is not None and modseq is not None and known < modseq:
            entries = _by_uid(conn, status, known)
            stale = any(e.modseq is not None and e.modseq <= known for e in entries.values())
            flags = {uid: e.flags for uid, e in entries.items()}
            return FlagRead(status.uidvalidity, modseq, "changedsince", flags, sweep_from, stale)
    if condstore and not (same and cursor is not None and cursor.unreliable):
        # No baseline (or HIGHESTMODSEQ went down): every message once.
        if status.exists < 1:
            return FlagRead(status.uidvalidity, modseq, "full")
        entries = _by_uid(conn, status, None)
        flags = {uid: e.flags for uid, e in entries.items()}
        return FlagRead(status.uidvalidity, modseq, "full", flags)
    seqset, next_sweep = window_ranges(status.exists, sweep_from, window.newest, window.sweep)
    if seqset is None:
        return FlagRead(status.uidvalidity, modseq, "window")
    read = parse_flag_lines(conn.io(fetch_flag_lines, conn.client, seqset, False, None))
    flags = {uid: e.flags for uid, e in read.entries.items()}
    return FlagRead(status.uidvalidity, modseq, "window", flags, next_sweep)


def _by_uid(
    conn: Connection, status: MailboxStatus, changedsince: int | None
) -> dict[int, FlagEntry]:
    entries: dict[int, FlagEntry] = {}
    for span in uid_spans(status.uidnext, conn.settings.search_span):
        lines = conn.io(fetch_flag_lines, conn.client, span, True, changedsince)
        entries.update(parse_flag_lines(lines).entries)
    return entries


def uid_spans(uidnext: int | None, span: int) -> list[str]:
    """``1:*`` cut into spans of ``span`` UIDs below ``uidnext`` (the last one open-ended,
    so a message that came meanwhile is read too)."""
    if uidnext is None or span < 1 or uidnext <= span + 1:
        return ["1:*"]
    starts = range(1, uidnext, span)
    return [f"{lo}:{lo + span - 1}" for lo in starts[:-1]] + [f"{starts[-1]}:*"]


def fetch_flag_lines(client: Any, seqset: str, by_uid: bool, changedsince: int | None) -> list[Any]:
    """``UID FETCH seqset (UID FLAGS MODSEQ) [(CHANGEDSINCE m)]``, or ``FETCH seqset (UID
    FLAGS)`` by sequence number (the window): imaplib's untagged FETCH data."""
    imap = client._imap
    imap.untagged_responses.pop("FETCH", None)  # earlier news is not this answer
    # By UID is CONDSTORE's read: MODSEQ tells a believable answer from a stale one.
    args = ["FETCH", seqset, "(UID FLAGS MODSEQ)" if by_uid else "(UID FLAGS)"]
    if changedsince is not None:
        args.append(f"(CHANGEDSINCE {changedsince})")
    tag = imap._command("UID", *args) if by_uid else imap._command(*args)
    typ, data = imap._command_complete("FETCH", tag)
    client._checkok("fetch", typ, data)
    typ, data = imap._untagged_response(typ, data, "FETCH")
    return list(data)
