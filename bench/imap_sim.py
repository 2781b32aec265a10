"""A load simulator for the fleet benchmark: a lightweight IMAP server on loopback that
holds thousands of idle sessions cheaply (one asyncio thread; one small protocol object
per connection), where Dovecot needs a process per session.

It speaks the part of IMAP4rev1 the workers use: the greeting with its capabilities,
CAPABILITY, LOGIN, SELECT/EXAMINE, LIST (INBOX only; any pattern, any RETURN options),
UID SEARCH (``UID`` sets, ``SINCE``, ``ALL``), UID FETCH and FETCH by sequence numbers
(``UID RFC822.SIZE INTERNALDATE FLAGS``, ``BODY.PEEK[HEADER.FIELDS (...)]``,
``BODY.PEEK[]`` and ``BODY.PEEK[]<offset.length>``), IDLE/DONE with ``* N EXISTS``
pushed on new mail, NOOP, CHECK, LOGOUT; pipelined commands are answered in order. Each
user has one in-memory INBOX; mail is added by ``deliver`` (the bench's APPEND), never by
the protocol. Anything else is answered ``BAD``.

``ImapSimulator(gmail=True)`` is Gmail (``bench/imap_sim_gmail.py``): X-GM-EXT-1 and
SPECIAL-USE announced, LIST answers the ``[Gmail]/...`` folders with ``\\All``,
``\\Sent``, ``\\Trash`` and ``\\Junk`` and a folder per user label, one message is in
every folder of its labels with one X-GM-MSGID; FETCH answers X-GM-MSGID, X-GM-THRID and
X-GM-LABELS, and ``UID STORE n +X-GM-LABELS (...)`` / ``-X-GM-LABELS`` moves labels
(copies follow); ``delete_forever`` (the control side) takes a message out of every folder.

The server keeps its own view of the sessions, so the benchmark can see what the
workers do from the other side: logins per user, the users with a session in IDLE, and
every time a mailbox had two sessions in IDLE at once ("watched twice").

Two ways to run it:

- in a thread of the calling process (``running_simulator``): the tests;
- as a process of its own (``python bench/imap_sim.py --users N``), driven over a local
  control socket (one JSON object a line, ``SimulatorProcess``): the benchmark, so the
  server's CPU is not the bench process's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import resource
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.imap_sim_gmail import (
    ALL_MAIL,
    GmailFolders,
    Identity,
    folder_of,
    in_folder,
    parse_labels,
    render_labels,
)
from bench.imap_sim_gmail import list_lines as gmail_list_lines

CAPABILITIES = b"IMAP4rev1 IDLE LITERAL+"
GMAIL_CAPABILITIES = b"IMAP4rev1 IDLE LITERAL+ SPECIAL-USE X-GM-EXT-1"
MAX_LINE = 64 * 1024  # a client line longer than this closes the connection
UIDVALIDITY = 1
_ATOM_OR_QUOTED = re.compile(rb'"((?:[^"\\]|\\.)*)"|(\S+)')
_PARTIAL = re.compile(rb"BODY\.PEEK\[\]<(\d+)\.(\d+)>")
_HEADER_FIELDS = re.compile(rb"BODY\.PEEK\[HEADER\.FIELDS \(([^)]*)\)\]")
_STORE_LABELS = re.compile(rb"(\d+) ([+-])X-GM-LABELS(?:\.SILENT)? (\(.*\))\Z", re.IGNORECASE)
_GMAIL_ITEMS = frozenset({b"X-GM-MSGID", b"X-GM-THRID", b"X-GM-LABELS"})
_MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()


def password_of(user: str) -> str:
    """The password of a simulated user (the benchmark is its only client)."""
    return f"pw-{user}"


def user_name(i: int) -> str:
    return f"user{i:05d}"


def sample_mail(user: str, n: int) -> bytes:
    """A small CRLF text/plain message, unique per (user, n)."""
    return (
        f"Message-ID: <{n}.{uuid.uuid4().hex}@{user}.sim.example>\r\n"
        f"Date: {format_datetime(datetime.now(UTC))}\r\n"
        f"From: Sender {n} <sender{n}@origin.example>\r\n"
        f"To: {user} <{user}@sim.example>\r\n"
        f"Subject: sim {user} {n}\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        f"Hello {user}, this is message {n}.\r\n"
    ).encode()


@dataclass(slots=True)
class Message:
    uid: int
    raw: bytes
    arrived: datetime
    identity: Identity | None = None  # Gmail's: shared by the message's copies

    def internaldate(self) -> bytes:
        d = self.arrived
        return (
            f'"{d.day:02d}-{_MONTHS[d.month - 1]}-{d.year:04d} '
            f'{d.hour:02d}:{d.minute:02d}:{d.second:02d} +0000"'
        ).encode()

    def header_fields(self, names: list[bytes]) -> bytes:
        wanted = tuple(name.lower() + b":" for name in names)
        head = self.raw.split(b"\r\n\r\n", 1)[0]
        lines = [line for line in head.split(b"\r\n") if line.lower().startswith(wanted)]
        return b"".join(line + b"\r\n" for line in lines) + b"\r\n"


@dataclass(slots=True)
class Mailbox:
    user: str
    password: str
    messages: list[Message] = field(default_factory=list)  # INBOX
    idlers: set[Session] = field(default_factory=set)
    logins: int = 0
    folders: dict[str, list[Message]] = field(default_factory=dict)
    last_uids: dict[str, int] = field(default_factory=dict)  # a UID is never reused
    gmail: GmailFolders | None = None

    def __post_init__(self) -> None:
        self.folders["INBOX"] = self.messages

    @property
    def uidnext(self) -> int:
        return self.last_uids.get("INBOX", 0) + 1

    def add(self, folder: str, raw: bytes, arrived: datetime, identity: Identity | None) -> int:
        uid = self.last_uids.get(folder, 0) + 1
        self.last_uids[folder] = uid
        self.folders.setdefault(folder, []).append(Message(uid, raw, arrived, identity))
        return uid

    def selectable(self, folder: str) -> bool:
        return folder == "INBOX" or (self.gmail is not None and self.gmail.selectable(folder))


@dataclass
class Stats:
    """The server's view, as the control API reports it."""

    connections: int = 0  # open now
    accepted: int = 0
    logins: int = 0
    failed_logins: int = 0
    commands: int = 0
    bad_commands: int = 0
    idle_users: int = 0  # mailboxes with at least one session in IDLE now
    doubled: int = 0  # times a mailbox got a second session in IDLE
    doubled_users: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {
            "connections": self.connections,
            "accepted": self.accepted,
            "logins": self.logins,
            "failedLogins": self.failed_logins,
            "commands": self.commands,
            "badCommands": self.bad_commands,
            "idleUsers": self.idle_users,
            "doubled": self.doubled,
            "doubledUsers": sorted(self.doubled_users)[:20],
        }


class ImapSimulator:
    """The mailboxes and the counters; ``Session`` objects speak the protocol. Touched
    only from the event loop's thread (``deliver`` and friends: through ``call``)."""

    def __init__(self, users: int = 0, *, gmail: bool = False) -> None:
        self.gmail = gmail
        self.capabilities = GMAIL_CAPABILITIES if gmail else CAPABILITIES
        self.mailboxes: dict[str, Mailbox] = {}
        self.stats = Stats()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._delivered = 0
        self.add_users(users)

    def add_users(self, count: int, start: int = 0) -> None:
        for i in range(start, start + count):
            name = user_name(i)
            if name not in self.mailboxes:
                self.mailboxes[name] = box = Mailbox(name, password_of(name))
                if self.gmail:
                    box.gmail = GmailFolders(self._copier(box))

    def _copier(self, box: Mailbox) -> Callable[[str, Identity], None]:
        """A new copy (the folder's next UID) of a message already in some folder."""

        def copy(folder: str, identity: Identity) -> None:
            original = next(m for ms in box.folders.values() for m in ms if m.identity is identity)
            box.add(folder, original.raw, original.arrived, identity)

        return copy

    def deliver(self, user: str, raw: bytes, labels: set[bytes] | None = None) -> int:
        """Add a message to the user's INBOX (on Gmail: to the folders of ``labels``,
        ``\\Inbox`` by default, and All Mail) and push EXISTS to its sessions in IDLE;
        its UID in INBOX (on Gmail without ``\\Inbox``: in All Mail)."""
        box = self.mailboxes[user]
        arrived = datetime.now(UTC).replace(microsecond=0)
        if box.gmail is None:
            uid = box.add("INBOX", raw, arrived, None)
        else:
            identity = box.gmail.new_identity(labels if labels is not None else {b"\\Inbox"})
            folders = [ALL_MAIL, *(folder_of(label) for label in identity.labels)]
            uids = {
                f: box.add(f, raw, arrived, identity) for f in folders if in_folder(identity, f)
            }
            uid = uids.get("INBOX") or uids.get(ALL_MAIL) or 0
        for session in box.idlers:
            session.announce()
        return uid

    def relabel(self, box: Mailbox, identity: Identity, add: list[bytes], rem: list[bytes]) -> None:
        """Gmail: change a message's labels; its copies enter and leave folders."""
        assert box.gmail is not None
        box.gmail.relabel(
            identity,
            add,
            rem,
            lambda f: any(m.identity is identity for m in box.folders.get(f, [])),
        )
        for folder, messages in box.folders.items():
            if not in_folder(identity, folder):
                messages[:] = [m for m in messages if m.identity is not identity]
        for session in box.idlers:
            session.announce()

    def delete_forever(self, user: str, msgid: int) -> None:
        """Gmail: a message deleted for good (emptied from Trash): gone from every folder."""
        box = self.mailboxes[user]
        for messages in box.folders.values():
            messages[:] = [m for m in messages if m.identity is None or m.identity.msgid != msgid]

    def deliver_all(self, users: list[str] | None = None) -> int:
        names = list(self.mailboxes) if users is None else users
        for name in names:
            self._delivered += 1
            self.deliver(name, sample_mail(name, self._delivered))
        return len(names)

    def idle_per_user(self) -> dict[str, int]:
        return {name: len(box.idlers) for name, box in self.mailboxes.items() if box.idlers}

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        """One control request (loop thread): ``stats``, ``deliver`` (``users``: names,
        or every user), ``reset_doubled``, ``idle`` (idle sessions per user)."""
        op = request.get("op")
        if op == "stats":
            return self.stats.as_dict()
        if op == "deliver":
            users = request.get("users")
            return {"delivered": self.deliver_all(users if isinstance(users, list) else None)}
        if op == "reset_doubled":
            self.stats.doubled, self.stats.doubled_users = 0, set()
            return {"ok": True}
        if op == "idle":
            return {"idle": self.idle_per_user()}
        if op == "logins":
            return {"logins": {n: b.logins for n, b in self.mailboxes.items() if b.logins}}
        return {"error": f"unknown op {op!r}"}

    # -- serving ----------------------------------------------------------------------

    async def serve(self, host: str, port: int) -> asyncio.Server:
        self.loop = asyncio.get_running_loop()
        return await self.loop.create_server(
            lambda: Session(self), host, port, backlog=4096, reuse_address=True
        )

    def enter_idle(self, session: Session, box: Mailbox) -> None:
        box.idlers.add(session)
        if len(box.idlers) == 1:
            self.stats.idle_users += 1
        elif len(box.idlers) == 2:
            self.stats.doubled += 1
            self.stats.doubled_users.add(box.user)

    def leave_idle(self, session: Session, box: Mailbox) -> None:
        if session in box.idlers:
            box.idlers.discard(session)
            if not box.idlers:
                self.stats.idle_users -= 1


class Session(asyncio.Protocol):
    """One client connection: a line buffer, the login and the selected mailbox, and
    the IDLE it is in (its tag)."""

    __slots__ = (
        "box",
        "buffer",
        "folder",
        "idle_tag",
        "known",
        "selected",
        "server",
        "transport",
    )

    def __init__(self, server: ImapSimulator) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.box: Mailbox | None = None
        self.selected = False
        self.folder = "INBOX"  # the selected one, when ``selected``
        self.idle_tag: bytes | None = None
        self.known = 0  # the message count this session was told (EXISTS)

    # -- transport --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.stats.connections += 1
        self.server.stats.accepted += 1
        self.send(b"* OK [CAPABILITY " + self.server.capabilities + b"] imap-sim ready\r\n")

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.stats.connections -= 1
        if self.box is not None:
            self.server.leave_idle(self, self.box)
        self.transport = None

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None:
            line, sep, rest = self.buffer.partition(b"\n")
            if not sep:
                break
            self.buffer = rest
            self.line(line.rstrip(b"\r"))
        if len(self.buffer) > MAX_LINE and self.transport is not None:
            self.transport.close()

    def announce(self) -> None:
        """Tell an idling session of mail it does not know yet."""
        assert self.box is not None
        count = len(self.view)
        if count > self.known:
            self.known = count
            self.send(b"* %d EXISTS\r\n" % count)

    # -- commands ---------------------------------------------------------------------

    def line(self, line: bytes) -> None:
        self.server.stats.commands += 1
        if self.idle_tag is not None:
            if line.strip().upper() == b"DONE":
                tag, self.idle_tag = self.idle_tag, None
                assert self.box is not None
                self.server.leave_idle(self, self.box)
                self.send(tag + b" OK IDLE terminated\r\n")
            else:
                self.bad(b"*", b"expected DONE")
            return
        tag, _, rest = line.partition(b" ")
        name, _, args = rest.partition(b" ")
        verb = name.upper()
        if not tag or not verb:
            self.bad(b"*", b"no command")
            return
        if verb == b"UID":
            sub, _, args = args.partition(b" ")
            verb = b"UID " + sub.upper()
        if self.selected:
            self.announce()  # mail that came since the last answer
        handler = _COMMANDS.get(verb)
        if handler is None:
            self.bad(tag, b"unknown command")
            return
        handler(self, tag, args)

    def bad(self, tag: bytes, text: bytes) -> None:
        self.server.stats.bad_commands += 1
        self.send(tag + b" BAD " + text + b"\r\n")

    def ok(self, tag: bytes, text: bytes = b"done") -> None:
        self.send(tag + b" OK " + text + b"\r\n")

    def cmd_capability(self, tag: bytes, args: bytes) -> None:
        self.send(b"* CAPABILITY " + self.server.capabilities + b"\r\n")
        self.ok(tag)

    def cmd_noop(self, tag: bytes, args: bytes) -> None:
        self.ok(tag)

    def cmd_logout(self, tag: bytes, args: bytes) -> None:
        self.send(b"* BYE logging out\r\n")
        self.ok(tag)
        if self.transport is not None:
            self.transport.close()

    def cmd_login(self, tag: bytes, args: bytes) -> None:
        if self.box is not None:
            self.bad(tag, b"already logged in")
            return
        words = [
            (m[1].replace(b'\\"', b'"').replace(b"\\\\", b"\\") if m[1] is not None else m[2])
            for m in _ATOM_OR_QUOTED.finditer(args)
        ]
        box = None
        if len(words) == 2:
            box = self.server.mailboxes.get(words[0].decode(errors="replace"))
        if box is None or box.password.encode() != words[1]:
            self.server.stats.failed_logins += 1
            self.send(tag + b" NO [AUTHENTICATIONFAILED] Authentication failed.\r\n")
            return
        self.box = box
        box.logins += 1
        self.server.stats.logins += 1
        self.send(tag + b" OK [CAPABILITY " + self.server.capabilities + b"] Logged in\r\n")

    def cmd_select(self, tag: bytes, args: bytes, readonly: bool = False) -> None:
        if self.box is None:
            self.bad(tag, b"not logged in")
            return
        name = args.strip().strip(b'"').decode(errors="replace")
        name = "INBOX" if name.upper() == "INBOX" else name
        if not self.box.selectable(name):
            self.send(tag + b" NO [NONEXISTENT] Mailbox doesn't exist\r\n")
            return
        box = self.box
        self.selected, self.folder = True, name
        self.known = len(self.view)
        uidnext = box.last_uids.get(name, 0) + 1
        self.send(
            b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)\r\n"
            b"* OK [PERMANENTFLAGS ()] Read-only mailbox.\r\n"
            b"* %d EXISTS\r\n* 0 RECENT\r\n"
            b"* OK [UIDVALIDITY %d] UIDs valid\r\n"
            b"* OK [UIDNEXT %d] Predicted next UID\r\n" % (self.known, UIDVALIDITY, uidnext)
        )
        self.ok(tag, b"[READ-ONLY] Examine completed" if readonly else b"[READ-WRITE] Select")

    def cmd_examine(self, tag: bytes, args: bytes) -> None:
        self.cmd_select(tag, args, readonly=True)

    @property
    def view(self) -> list[Message]:
        """The selected folder's messages (INBOX before a SELECT)."""
        assert self.box is not None
        return self.box.folders.get(self.folder, [])

    def cmd_list(self, tag: bytes, args: bytes) -> None:
        """INBOX alone (Gmail: its folders): the poll's folder pass lists them (any
        pattern, any RETURN options: answered as a plain LIST)."""
        if self.box is None:
            self.bad(tag, b"not logged in")
            return
        gmail = self.box.gmail
        lines = (
            [b'(\\HasNoChildren) "/" INBOX']
            if gmail is None
            else gmail_list_lines(gmail.user_labels)
        )
        self.send(b"".join(b"* LIST " + line + b"\r\n" for line in lines))
        self.ok(tag, b"List completed")

    def cmd_uid_store(self, tag: bytes, args: bytes) -> None:
        """Gmail's label moves only: ``UID STORE n +X-GM-LABELS (...)`` or ``-X-GM-LABELS``."""
        box = self.box
        match = _STORE_LABELS.match(args.strip())
        labels = parse_labels(match[3]) if match else None
        if not self.selected or box is None or box.gmail is None or match is None:
            self.bad(tag, b"only UID STORE n +X-GM-LABELS (...) on Gmail")
            return
        if labels is None:
            self.bad(tag, b"bad label list")
            return
        uid = int(match[1])
        found = [m for m in self.view if m.uid == uid and m.identity is not None]
        if found and found[0].identity is not None:
            identity = found[0].identity
            add, remove = (labels, []) if match[2] == b"+" else ([], labels)
            self.server.relabel(box, identity, add, remove)
            if not match[0].upper().count(b".SILENT"):
                seq = next((i for i, m in enumerate(self.view, 1) if m.uid == uid), 0)
                if seq:
                    self.send(
                        b"* %d FETCH (UID %d X-GM-LABELS %s)\r\n"
                        % (seq, uid, render_labels(identity.labels))
                    )
        self.ok(tag)

    def cmd_check(self, tag: bytes, args: bytes) -> None:
        self.ok(tag)

    def cmd_idle(self, tag: bytes, args: bytes) -> None:
        if not self.selected or self.box is None:
            self.bad(tag, b"no mailbox selected")
            return
        self.idle_tag = tag
        self.send(b"+ idling\r\n")
        self.server.enter_idle(self, self.box)
        self.announce()

    def cmd_uid_search(self, tag: bytes, args: bytes) -> None:
        if not self.selected or self.box is None:
            self.bad(tag, b"no mailbox selected")
            return
        messages = self.view
        words = args.split()
        found = list(messages)
        i = 0
        while i < len(words):
            key = words[i].upper()
            if key == b"ALL":
                i += 1
            elif key == b"UID" and i + 1 < len(words):
                wanted = uid_set(words[i + 1], self.view)
                found = [m for m in found if m.uid in wanted]
                i += 2
            elif key == b"SINCE" and i + 1 < len(words):
                since = parse_date(words[i + 1])
                if since is None:
                    self.bad(tag, b"bad date")
                    return
                found = [m for m in found if m.arrived.date() >= since]
                i += 2
            else:
                self.bad(tag, b"unsupported search key")
                return
        self.send(b"* SEARCH" + b"".join(b" %d" % m.uid for m in found) + b"\r\n")
        self.ok(tag)

    def cmd_uid_fetch(self, tag: bytes, args: bytes) -> None:
        if not self.selected or self.box is None:
            self.bad(tag, b"no mailbox selected")
            return
        set_text, _, items = args.partition(b" ")
        wanted_items = FetchItems.parse(items)
        if wanted_items is None:
            self.bad(tag, b"unsupported fetch item")
            return
        self._fetch(tag, uid_set(set_text, self.view), wanted_items)

    def cmd_fetch(self, tag: bytes, args: bytes) -> None:
        """FETCH by sequence numbers (the flag window reads the newest messages so)."""
        if not self.selected or self.box is None:
            self.bad(tag, b"no mailbox selected")
            return
        set_text, _, items = args.partition(b" ")
        wanted_items = FetchItems.parse(items)
        if wanted_items is None:
            self.bad(tag, b"unsupported fetch item")
            return
        numbered = [Message(seq, b"", m.arrived) for seq, m in enumerate(self.view, 1)]
        seqs = uid_set(set_text, numbered)
        self._fetch(tag, {m.uid for seq, m in enumerate(self.view, 1) if seq in seqs}, wanted_items)

    def _fetch(self, tag: bytes, wanted: set[int], wanted_items: FetchItems) -> None:
        self.send(
            b"".join(
                wanted_items.render(seq, message)
                for seq, message in enumerate(self.view, 1)
                if message.uid in wanted
            )
        )
        self.ok(tag)


@dataclass(frozen=True, slots=True)
class FetchItems:
    """The items of a UID FETCH this server answers."""

    simple: frozenset[bytes]  # UID RFC822.SIZE INTERNALDATE FLAGS, Gmail's X-GM-*
    header_fields: tuple[bytes, ...] | None  # BODY.PEEK[HEADER.FIELDS (...)]
    partial: tuple[int, int] | None  # BODY.PEEK[]<offset.length>
    whole: bool  # BODY.PEEK[]

    @classmethod
    def parse(cls, items: bytes) -> FetchItems | None:
        upper = items.upper()
        if upper.startswith(b"(") and upper.endswith(b")"):
            upper = upper[1:-1]
        fields = _HEADER_FIELDS.search(upper)
        partial = _PARTIAL.search(upper)
        rest = _PARTIAL.sub(b"", _HEADER_FIELDS.sub(b"", upper)).split()
        whole = b"BODY.PEEK[]" in rest
        simple = frozenset(item for item in rest if item != b"BODY.PEEK[]")
        if not simple <= {b"UID", b"RFC822.SIZE", b"INTERNALDATE", b"FLAGS", *_GMAIL_ITEMS}:
            return None
        return cls(
            simple,
            tuple(fields[1].split()) if fields else None,
            (int(partial[1]), int(partial[2])) if partial else None,
            whole,
        )

    def render(self, seq: int, message: Message) -> bytes:
        parts = [b"UID %d" % message.uid]  # a UID FETCH always answers the UID
        if b"RFC822.SIZE" in self.simple:
            parts.append(b"RFC822.SIZE %d" % len(message.raw))
        if b"INTERNALDATE" in self.simple:
            parts.append(b"INTERNALDATE " + message.internaldate())
        if b"FLAGS" in self.simple:
            parts.append(b"FLAGS ()")
        gm = message.identity
        if gm is not None and b"X-GM-MSGID" in self.simple:
            parts.append(b"X-GM-MSGID %d" % gm.msgid)
        if gm is not None and b"X-GM-THRID" in self.simple:
            parts.append(b"X-GM-THRID %d" % gm.thrid)
        if gm is not None and b"X-GM-LABELS" in self.simple:
            parts.append(b"X-GM-LABELS " + render_labels(gm.labels))
        if self.header_fields is not None:
            value = message.header_fields(list(self.header_fields))
            key = b"BODY[HEADER.FIELDS (" + b" ".join(self.header_fields) + b")]"
            parts.append(key + b" {%d}\r\n" % len(value) + value)
        if self.partial is not None:
            offset, length = self.partial
            piece = message.raw[offset : offset + length]
            parts.append(b"BODY[]<%d> {%d}\r\n" % (offset, len(piece)) + piece)
        if self.whole:
            parts.append(b"BODY[] {%d}\r\n" % len(message.raw) + message.raw)
        return b"* %d FETCH (" % seq + b" ".join(parts) + b")\r\n"


_COMMANDS = {
    b"CAPABILITY": Session.cmd_capability,
    b"NOOP": Session.cmd_noop,
    b"LOGOUT": Session.cmd_logout,
    b"LOGIN": Session.cmd_login,
    b"SELECT": Session.cmd_select,
    b"EXAMINE": Session.cmd_examine,
    b"CHECK": Session.cmd_check,
    b"LIST": Session.cmd_list,
    b"IDLE": Session.cmd_idle,
    b"UID SEARCH": Session.cmd_uid_search,
    b"UID FETCH": Session.cmd_uid_fetch,
    b"FETCH": Session.cmd_fetch,
    b"UID STORE": Session.cmd_uid_store,
}


def uid_set(text: bytes, messages: list[Message]) -> set[int]:
    """The UIDs of ``messages`` a UID set names (``1:5,7``, ``3:*``; ``*`` is the largest UID,
    so ``n:*`` past it still names the last message, as RFC 3501 says)."""
    top = messages[-1].uid if messages else 0
    ranges: list[tuple[int, int]] = []
    for part in text.split(b","):
        lo_text, _, hi_text = part.partition(b":")
        try:
            lo = top if lo_text == b"*" else int(lo_text)
            hi = lo if not hi_text else (top if hi_text == b"*" else int(hi_text))
        except ValueError:
            return set()
        ranges.append((min(lo, hi), max(lo, hi)))
    return {m.uid for m in messages if any(lo <= m.uid <= hi for lo, hi in ranges)}


def parse_date(text: bytes) -> date | None:
    try:
        day, month, year = text.strip(b'"').decode().split("-")
        return date(int(year), _MONTHS.index(month.capitalize()) + 1, int(day))
    except ValueError:
        return None


# --- running it ---------------------------------------------------------------------------


@dataclass
class Running:
    """A simulator serving on a thread of this process."""

    sim: ImapSimulator
    host: str
    port: int
    loop: asyncio.AbstractEventLoop

    def call(self, request: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """A control request, answered on the loop's thread."""

        async def run() -> dict[str, Any]:
            return self.sim.control(request)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def deliver(self, user: str, raw: bytes, labels: set[bytes] | None = None) -> int:
        async def run() -> int:
            return self.sim.deliver(user, raw, labels)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def delete_forever(self, user: str, msgid: int) -> None:
        async def run() -> None:
            self.sim.delete_forever(user, msgid)

        asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)


@contextlib.contextmanager
def running_simulator(users: int = 10, *, gmail: bool = False) -> Iterator[Running]:
    """A simulator with ``users`` users on 127.0.0.1 (a free port), on a daemon thread;
    stopped on leaving the block. ``gmail``: Gmail's folders and X-GM-EXT-1."""
    sim = ImapSimulator(users, gmail=gmail)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, asyncio.Server] = {}

    async def start() -> None:
        holder["server"] = await sim.serve("127.0.0.1", 0)
        started.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, name="imap-sim", daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the IMAP simulator did not start")
    port = holder["server"].sockets[0].getsockname()[1]
    try:
        yield Running(sim, "127.0.0.1", port, loop)
    finally:

        async def stop() -> None:
            holder["server"].close()
            for box in sim.mailboxes.values():
                for session in list(box.idlers):
                    if session.transport is not None:
                        session.transport.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


class ControlConnection(asyncio.Protocol):
    """The control socket: one JSON request a line, one JSON answer a line."""

    def __init__(self, sim: ImapSimulator) -> None:
        self.sim = sim
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\n" in self.buffer and self.transport is not None:
            line, _, self.buffer = self.buffer.partition(b"\n")
            try:
                answer = self.sim.control(json.loads(line))
            except (ValueError, KeyError, TypeError) as error:
                answer = {"error": f"{type(error).__name__}: {error}"}
            self.transport.write(json.dumps(answer).encode() + b"\n")


async def _serve_process(users: int, port: int, control_port: int) -> None:
    sim = ImapSimulator(users)
    server = await sim.serve("127.0.0.1", port)
    loop = asyncio.get_running_loop()
    control = await loop.create_server(lambda: ControlConnection(sim), "127.0.0.1", control_port)
    ports = {
        "port": server.sockets[0].getsockname()[1],
        "control": control.sockets[0].getsockname()[1],
    }
    print(json.dumps(ports), flush=True)
    await asyncio.Event().wait()  # until killed


class SimulatorProcess:
    """``python bench/imap_sim.py`` as a child process, and a client of its control
    socket. ``close`` ends the child."""

    def __init__(self, users: int, log: Path) -> None:
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--users", str(users)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        if not first:
            self.proc.wait(timeout=10)
            raise RuntimeError(f"the IMAP simulator did not start: {log.read_text()[-2000:]}")
        ports = json.loads(first)
        self.host = "127.0.0.1"
        self.port = int(ports["port"])
        self._control = socket.create_connection((self.host, int(ports["control"])), timeout=60)
        self._reader = self._control.makefile("rb")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        self._control.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
        answer: dict[str, Any] = json.loads(self._reader.readline())
        if "error" in answer:
            raise RuntimeError(f"imap-sim {op}: {answer['error']}")
        return answer

    def stats(self) -> dict[str, Any]:
        return self.call("stats")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._control.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100, help="users user00000 ... (100)")
    parser.add_argument("--port", type=int, default=0, help="IMAP port (0: a free one)")
    parser.add_argument("--control-port", type=int, default=0, help="control port (0: free)")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    del soft
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_process(args.users, args.port, args.control_port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
