"""NOTIFY (RFC 5465) on a watch's connection: the command, and the news its lines carry.

Pure, but for ``set_notify`` (one round trip). A watch IDLEs on INBOX; with NOTIFY the
server also reports the other synced folders' changes on that one connection, as
``* STATUS <folder> (...)`` lines, so they need no poll of their own to be seen:

    NOTIFY SET (selected (MessageNew MessageExpunge FlagChange))
               (mailboxes (<folder> ...) (MessageNew MessageExpunge FlagChange))

``selected`` keeps INBOX's news as plain IDLE gives it (EXISTS, EXPUNGE, FETCH FLAGS);
``mailboxes`` names exactly the synced folders, so the server says nothing of the others.
Past ``MAX_NAMED`` folders, or a command past ``MAX_COMMAND_BYTES``, it asks for
``personal`` instead (every folder of the user) and the STATUS lines of folders not
synced are dropped here. An empty list of folders is ``NOTIFY NONE``.

A STATUS line is news only when it names a watched folder: its name is read as an atom
or a quoted string (a literal, or anything malformed, is no news) and decoded strictly
(``list_response.decode_name``). ``* OK [NOTIFICATIONOVERFLOW]`` means the server
stopped notifying (RFC 5465 section 5.8): news too, so the account is polled at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from imapclient.exceptions import IMAPClientAbortError, IMAPClientError
from imapclient.imap_utf7 import encode as encode_utf7

from infrastructure.imap.list_response import decode_name
from infrastructure.imap.pipeline import run_pipelined
from infrastructure.imap.wire import imap_of

EVENTS = b"(MessageNew MessageExpunge FlagChange)"
MAX_NAMED = 100
MAX_COMMAND_BYTES = 8 * 1024
MAX_NAME_BYTES = 4 * 1024  # a longer name on a STATUS line is no synced folder's
OVERFLOW = b"[NOTIFICATIONOVERFLOW]"


def quoted(name: str) -> bytes | None:
    """``name`` as an IMAP quoted string of modified UTF-7; None when it cannot be one, or
    holds a control character (no folder listing lets one through)."""
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in name):
        return None
    try:
        raw: bytes = encode_utf7(name)
    except (UnicodeError, ValueError):
        return None
    if not raw or any(c < 0x20 or c > 0x7E for c in raw):
        return None
    return b'"' + raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def notify_command(folders: Iterable[str]) -> bytes:
    """The NOTIFY command (without its tag) for INBOX selected and ``folders`` besides."""
    names = [q for q in (quoted(f) for f in folders if f.upper() != "INBOX") if q is not None]
    if not names:
        return b"NOTIFY NONE"
    selected = b"NOTIFY SET (selected " + EVENTS + b")"
    command = selected + b" (mailboxes (" + b" ".join(names) + b") " + EVENTS + b")"
    if len(names) > MAX_NAMED or len(command) > MAX_COMMAND_BYTES:
        command = selected + b" (personal " + EVENTS + b")"
    return command


def status_folder(line: bytes) -> str | None:
    """The decoded folder name of a ``* STATUS`` line; None for any other line, a literal
    name, or a name that is not strict modified UTF-7."""
    if line[:9].upper() != b"* STATUS ":
        return None
    rest = line[9 : 9 + 2 * MAX_NAME_BYTES + 2]  # room for a quoted name's escapes
    if rest[:1] == b'"':
        raw = _unquote(rest)
    else:
        raw = rest.split(b" ", 1)[0]
        if not raw or raw[:1] in (b"{", b"("):
            return None
    if raw is None or len(raw) > MAX_NAME_BYTES:
        return None
    return decode_name(raw)


def _unquote(text: bytes) -> bytes | None:
    out = bytearray()
    i = 1
    while i < len(text):
        c = text[i]
        if c == 0x5C:  # backslash: the next byte stands for itself
            if i + 1 >= len(text):
                return None
            out.append(text[i + 1])
            i += 2
        elif c == 0x22:  # the closing quote
            return bytes(out)
        else:
            out.append(c)
            i += 1
    return None


def overflowed(line: bytes) -> bool:
    """The server stopped notifying (``* OK [NOTIFICATIONOVERFLOW] ...``)."""
    return line[:5].upper() == b"* OK " and line[5:27].upper() == OVERFLOW


def status_news(data: Sequence[Any], watched: frozenset[str]) -> bool:
    """Whether imaplib's untagged STATUS data (``folder (items)``, as the reader kept it
    from the lines of other commands) names a watched folder."""
    for item in data:
        if isinstance(item, bytes) and status_folder(b"* STATUS " + item) in watched:
            return True
    return False


def set_notify(client: Any, command: bytes) -> bool:
    """Send ``command`` (one round trip, in the caller's operation): True when the server
    took it, False when it answered NO or BAD (the session stays usable)."""
    try:
        run_pipelined(imap_of(client), [("NOTIFY", command)])
    except IMAPClientAbortError:
        raise
    except IMAPClientError:
        return False
    return True
