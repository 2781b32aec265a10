"""Several IMAP commands in one write, their answers read in one pass (RFC 3501 §5.5).

A watch's fetch after IDLE said new mail came is DONE, the new mail's metadata, its
bodies and IDLE again. Sent one at a time that is four round trips, and the server's
session process wakes up for each of them; in a burst of new mail in thousands of
mailboxes those wake-ups are most of the server's CPU. Pipelined, it is one write and
one read. The server answers in order, so each command sees the effects of the ones
before it.

Works on imapclient's imaplib connection (through ``wire``): tags come from imaplib (so
its bookkeeping of tagged answers stays right) and responses are read with imaplib's
reader, which collects untagged data as for any command.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from imapclient.exceptions import IMAPClientError

from infrastructure.imap.wire import (
    get_response,
    new_tag,
    tagged_commands,
    untagged_responses,
)


@dataclass(frozen=True, slots=True)
class Pipelined:
    fetched: list[Any]
    """The untagged FETCH data of every command, in imaplib's shape (``parse_fetch``)."""
    news_after_done: bool
    """The server announced mail (EXISTS/RECENT) after the old IDLE ended (if any): it
    came while the commands ran, and they may not have seen it."""
    idle_tag: bytes | None
    """The tag of the IDLE now running (``then_idle``)."""
    statuses: list[Any]
    """Untagged STATUS data (NOTIFY's news of other folders) that came with the answers,
    or with earlier commands' (the reader keeps it until asked)."""


@dataclass(frozen=True, slots=True)
class Sent:
    """Commands written and not yet read (``send_pipelined``)."""

    idle_tag: bytes | None  # the IDLE they end
    tags: tuple[tuple[bytes, str], ...]  # each command's tag and name
    new_idle: bytes | None  # the IDLE they start


def run_pipelined(
    imap: Any,
    commands: Sequence[tuple[str, bytes]],
    idle_tag: bytes | None = None,
    then_idle: bool = False,
) -> Pipelined:
    """Send DONE (when ``idle_tag`` names a running IDLE), each ``(name, command)``, then
    IDLE (``then_idle``) in one write; read until every answer came. A command answered
    other than OK raises ``IMAPClientError`` like imapclient's own checks (the session is
    then in an unknown state: the caller drops it)."""
    return read_pipelined(imap, send_pipelined(imap, commands, idle_tag, then_idle))


def send_pipelined(
    imap: Any,
    commands: Sequence[tuple[str, bytes]],
    idle_tag: bytes | None = None,
    then_idle: bool = False,
) -> Sent:
    """The write of ``run_pipelined``: the server starts on it while we do other work."""
    tags = tuple((new_tag(imap), name) for name, _ in commands)
    lines = [b"DONE"] if idle_tag is not None else []
    lines += [tag + b" " + command for (tag, _), (_, command) in zip(tags, commands, strict=True)]
    new_idle = new_tag(imap) if then_idle else None
    if new_idle is not None:
        lines.append(new_idle + b" IDLE")
    imap.send(b"\r\n".join(lines) + b"\r\n")
    return Sent(idle_tag, tags, new_idle)


def read_pipelined(imap: Any, sent: Sent) -> Pipelined:
    """The read of ``run_pipelined``: every answer to ``sent``."""
    untagged = untagged_responses(imap)
    for kind in ("FETCH", "EXISTS", "RECENT"):
        untagged.pop(kind, None)
    if sent.idle_tag is not None:
        _complete(imap, sent.idle_tag, "IDLE")
        for kind in ("EXISTS", "RECENT"):  # the news IDLE already told: not new
            untagged.pop(kind, None)
    for tag, name in sent.tags:
        _complete(imap, tag, name)
    if sent.new_idle is not None:
        while get_response(imap) is not None:  # None: the continuation, "+ idling"
            if tagged_commands(imap).get(sent.new_idle):
                _complete(imap, sent.new_idle, "IDLE")  # refused: raises
    news = "EXISTS" in untagged or "RECENT" in untagged
    fetched = untagged.pop("FETCH", [])
    for kind in ("EXISTS", "RECENT", "EXPUNGE"):
        untagged.pop(kind, None)
    return Pipelined(fetched, news, sent.new_idle, untagged.pop("STATUS", []))


def _complete(imap: Any, tag: bytes, name: str) -> None:
    """Read until ``tag`` is answered; raise unless it is OK."""
    tagged = tagged_commands(imap)
    while not tagged.get(tag):
        get_response(imap)
    typ, data = tagged.pop(tag)
    if typ != "OK":
        text = data[0].decode(errors="replace") if data and data[0] else ""
        raise IMAPClientError(f"{name} failed: {typ} {text}")
