"""``IdleChannel``: the IDLE protocol of a session — IDLE, send-ahead, the after-IDLE fetch.

State machine: OUT --start--> IDLING --done--> OUT; IDLING --read sees new mail-->
SENT-AHEAD (DONE, the new mail's metadata, its first bodies and IDLE again written in
one pipelined write, ``pipeline``) --the watch's fetch (``fetch_after``), or any other
command (``settle``)--> IDLING again. Any other command ends a running IDLE first
(``done``); ``start`` reports news the server sent with its "+ idling" (it would sit in
the connection's buffer, unseen by a selector).

A liveness probe (``probe``) is DONE and IDLE again in one write, sent from the thread
that waits on the socket and never waited for: its answer (the old IDLE's tagged OK,
then the new "+ idling") comes through ``read`` like any other news, so probing
thousands of connections costs no thread each. IDLING --probe--> PROBING --"+ idling"
read--> IDLING (``IdleNews.answered``). A command while PROBING first reads the rest of
the answer (``_end_probe``).

NOTIFY (``notify``, ``infrastructure.imap.notify``): once set, the server also reports
the watched folders' changes on this connection, as STATUS lines during IDLE (news:
``IdleNews.folders_changed``) or beside other commands' answers (kept by the reader and
owed to the next ``start``), and INBOX's own flag changes and expunges count as that
news too. Without it, IDLE news is what it always was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from application.mail.ports import IdleNews, IdleUnsupported, MailboxTransientError
from infrastructure.imap.connection import Connection
from infrastructure.imap.fetch_response import parse_fetch
from infrastructure.imap.identity import message_ref, refusal, valid_id
from infrastructure.imap.notify import (
    notify_command,
    overflowed,
    set_notify,
    status_folder,
    status_news,
)
from infrastructure.imap.paging import Pushed, Unparseable
from infrastructure.imap.pipeline import (
    Pipelined,
    Sent,
    read_pipelined,
    run_pipelined,
    send_pipelined,
)
from infrastructure.imap.wire import (
    idle_tag,
    imap_of,
    mend_refused,
    read_available,
    read_line,
    set_idle_tag,
    socket_fileno,
    uid_fetch_command,
)

_PARTIAL = b"BODY[]<0>"
# After IDLE, the bodies of the first few new messages come with their metadata, up to
# this size each (the rest is fetched as on any page): a push is usually one message.
PUSH_BODIES = 8
PUSH_BODY_BYTES = 128 * 1024
_NEW_MAIL = (b"EXISTS", b"RECENT")
# The accounts of one server mostly have their folders pushed under the same names: one
# frozenset of them for all its watches, not one per watch (a worker holds thousands).
# Names are the server's data: past this many distinct sets the table starts again.
SHARED_NAME_SETS = 1024
_name_sets: dict[frozenset[str], frozenset[str]] = {}


def shared_names(names: frozenset[str]) -> frozenset[str]:
    """``names``, or an equal set another watch already holds."""
    if len(_name_sets) >= SHARED_NAME_SETS:
        _name_sets.clear()
    return _name_sets.setdefault(names, names)


def news(lines: list[bytes], watched: frozenset[str] | None = None) -> IdleNews:
    """What IDLE lines say: new mail (EXISTS/RECENT), a hang-up (BYE), anything at all;
    with NOTIFY set (``watched``: the folders it names), a change in a watched folder or
    in INBOX's flags or messages, or the server's end of notifying."""
    exists = closed = changed = False
    for line in lines:
        words = line.split(None, 3)
        if words[:1] != [b"*"] or len(words) < 2:
            continue
        kind = words[1].upper()
        if kind == b"BYE":
            closed = True
        elif kind.isdigit() and len(words) > 2 and words[2].rstrip().upper() in _NEW_MAIL:
            exists = True
        elif watched is not None and not changed:
            changed = _changed(kind, words, line, watched)
    return IdleNews(exists=exists, closed=closed, heard=bool(lines), folders_changed=changed)


def _changed(kind: bytes, words: list[bytes], line: bytes, watched: frozenset[str]) -> bool:
    if kind == b"STATUS":
        return status_folder(line) in watched
    if kind == b"OK":
        return overflowed(line)
    if kind == b"VANISHED":
        return True
    return len(words) > 2 and words[2].rstrip().upper() in (b"FETCH", b"EXPUNGE")


class IdleChannel:
    def __init__(
        self, conn: Connection, capabilities: frozenset[str], metadata_items: list[str]
    ) -> None:
        self._conn = conn
        self._caps = capabilities
        self._items = metadata_items
        self.idling = False
        self._empty_reads = 0
        # The last UID of the last page that left nothing more (what a watch's cursor
        # will say after it), and a fetch sent ahead from it when IDLE said new mail came.
        self.last_uid: int | None = None
        self._prefetch: tuple[int, Sent] | None = None
        # A probe in flight: the tag of the IDLE it ends, of the IDLE it starts, and
        # whether the first was answered yet.
        self._probe: tuple[bytes, bytes] | None = None
        self._probe_ended = False
        # With NOTIFY set: the folders it names (None: not set), and whether the answers
        # of other commands brought news of them that ``start`` has yet to report.
        self.watched: frozenset[str] | None = None
        self._owed = False

    @property
    def busy(self) -> bool:
        """Idling or with a fetch in flight: the server would not answer a LOGOUT."""
        return self.idling or self._prefetch is not None or self._probe is not None

    def start(self, early: bool, on_enter: Callable[[], None]) -> IdleNews:
        """Enter IDLE unless idling already (``on_enter`` runs first); ``early``: news a
        settled send-ahead brought."""
        if not self.idling:  # a watch's fetch may have gone back to IDLE already
            if "IDLE" not in self._caps:
                raise IdleUnsupported("the server does not offer IDLE")
            on_enter()
            conn = self._conn
            entered = conn.io(run_pipelined, imap_of(conn.client), [], None, True)
            set_idle_tag(conn.client, entered.idle_tag)
            self._empty_reads, self.idling = 0, True
            early = entered.news_after_done  # announced before "+ idling"
            self._owe(entered.statuses)
        # Mail that came while the session was outside IDLE is announced the moment IDLE
        # begins, often in the same packet as "+ idling": then it already sits in the
        # connection's buffer, and a selector waiting on the socket would never see it.
        heard = news(self._conn.io(read_available, self._conn.client), self.watched)
        owed, self._owed = self._owed, False
        return dataclasses.replace(
            heard, exists=heard.exists or early, folders_changed=heard.folders_changed or owed
        )

    def notify(self, folders: Sequence[str]) -> bool:
        """NOTIFY for INBOX selected and ``folders`` besides (outside IDLE; one round
        trip, none when these folders are pushed already); an empty list undoes an earlier
        one. False without NOTIFY, when the server refused it (IDLE news is then what it
        was), or when there is nothing to undo."""
        if "NOTIFY" not in self._caps:
            return False
        command = notify_command(folders)
        names = shared_names(frozenset(f for f in folders if f.upper() != "INBOX"))
        if command == b"NOTIFY NONE" and self.watched is None:
            return False
        if names == self.watched:  # asked for already: no round trip, IDLE goes on
            return True
        self.done()
        taken = self._conn.io(set_notify, self._conn.client, command)
        self.watched = names if taken and command != b"NOTIFY NONE" else None
        return self.watched is not None

    def _owe(self, statuses: list[Any]) -> None:
        """STATUS data that came beside other answers: news for the next ``start``."""
        if statuses and self.watched is not None and status_news(statuses, self.watched):
            self._owed = True

    def fileno(self) -> int:
        return socket_fileno(self._conn.client)

    def read(self) -> IdleNews:
        """Called when the socket is readable. A readable socket that yields no response
        twice in a row has reached EOF (the server closed it).

        Reads the buffered lines itself: imapclient's ``idle_check`` polls the socket
        again and runs every line through its response lexer, which costs a multiplexer
        serving thousands of watches more than the news is worth; all we need to know is
        whether EXISTS (new mail) or BYE came."""
        lines = self._conn.io(read_available, self._conn.client)
        if not lines:
            self._empty_reads += 1
            return IdleNews(closed=self._empty_reads >= 2)
        self._empty_reads = 0
        heard = news(lines, self.watched)
        if self._probe is not None:
            answer = self._probe_answer(lines)
            if answer is None:  # refused: the session's state is unknown
                return IdleNews(exists=heard.exists, closed=True, heard=True)
            heard = dataclasses.replace(heard, answered=answer)
        if heard.exists and not heard.closed and self._probe is None:
            self._send_ahead()
        return heard

    def probe(self) -> None:
        """DONE + IDLE in one write, not waited for (the answer comes through ``read``).
        Nothing to do unless idling with nothing else in flight."""
        if not self.idling or self._probe is not None or self._prefetch is not None:
            return
        conn = self._conn
        old = idle_tag(conn.client)
        sent = conn.io(send_pipelined, imap_of(conn.client), [], old, True)
        assert old is not None and sent.new_idle is not None
        self._probe, self._probe_ended = (old, sent.new_idle), False

    def _probe_answer(self, lines: list[bytes]) -> bool | None:
        """Follow a probe's answer through ``lines``: True once the new IDLE runs, False
        while it is still coming, None when the server refused either command."""
        assert self._probe is not None
        old, new = self._probe
        for line in lines:
            if not self._probe_ended:
                if line.startswith(old + b" "):
                    if line[len(old) + 1 : len(old) + 3].upper() != b"OK":
                        return None
                    self._probe_ended = True
            elif line.startswith(b"+"):
                set_idle_tag(self._conn.client, new)  # imapclient's idle_done ends it
                self._probe = None
                return True
            elif line.startswith(new + b" "):  # IDLE refused
                return None
        return False

    def _end_probe(self) -> None:
        """Read the rest of a probe's answer (the session is idling after it)."""
        while self._probe is not None:
            line = self._conn.io(read_line, self._conn.client)
            if self.watched is not None and news([line], self.watched).folders_changed:
                self._owed = True
            if self._probe_answer([line]) is None:
                self._probe = None
                self.idling = False
                raise self._conn.fail(MailboxTransientError("IDLE refused after a probe"))

    def _send_ahead(self) -> None:
        """New mail: send the fetch a watch will ask for (``fetch_after``) now, from the
        cursor the last page left, so the server works on it while the fetch waits for a
        thread. A cursor that turns out different only costs reading it unused."""
        last = self.last_uid
        if last is None or self._prefetch is not None or not self.idling:
            return
        conn = self._conn
        sent = conn.io(
            send_pipelined,
            imap_of(conn.client),
            self._commands(last),
            idle_tag(conn.client),
            True,
        )
        self._prefetch, self.idling = (last, sent), False

    def settle(self) -> bool:
        """Read a fetch sent ahead and not taken (the session is idling after it)."""
        self._end_probe()
        if self._prefetch is None:
            return False
        _, sent = self._prefetch
        self._prefetch = None
        self._read(sent)
        return True

    def done(self) -> None:
        self.settle()
        if not self.idling:
            return
        self.idling = False
        self._conn.io(self._conn.client.idle_done)

    def fetch_after(self, last_uid: int) -> Pushed:
        """A watch's fetch after IDLE said new mail came (usually a handful of messages),
        in one pipelined exchange: [DONE], the metadata of everything above ``last_uid``
        (``UID FETCH last+1:*``, no SEARCH), the bodies of the first few of them, [IDLE
        again] — the brackets when the session was idling. Usually sent already, when
        the news came (``_send_ahead``)."""
        self._end_probe()
        prefetched, self._prefetch = self._prefetch, None
        if prefetched is not None and prefetched[0] != last_uid:
            self._read(prefetched[1])  # sent from another cursor: not this fetch
            prefetched = None
        conn = self._conn
        if prefetched is not None:
            sent = prefetched[1]
        else:
            was_idling, self.idling = self.idling, False
            sent = conn.io(
                send_pipelined,
                imap_of(conn.client),
                self._commands(last_uid),
                idle_tag(conn.client) if was_idling else None,
                was_idling,
            )
        done = self._read(sent)
        refused = conn.take_refused()
        fetched = mend_refused(done.fetched) if refused else done.fetched
        try:
            resp = parse_fetch(fetched, normalise_times=conn.client.normalise_times)
        except Exception:  # unreadable: the page fetches them again the ordinary way
            raise Unparseable from None
        # ``n:*`` past the last UID answers the last message: keep only what is new, and
        # only answers to this FETCH (news of flag changes carries no RFC822.SIZE).
        pushed = Pushed({}, {}, done.news_after_done)
        for uid, item in resp.items():
            if not valid_id(uid) or uid <= last_uid or b"RFC822.SIZE" not in item:
                continue
            reason = refusal(item)
            if reason is not None:
                conn.skipped(uid, reason)
                continue
            ref = pushed.known[uid] = message_ref(uid, item)
            body = item.get(_PARTIAL)
            if isinstance(body, bytes) and len(body) == ref.size:  # the whole message
                pushed.bodies[uid] = body
            elif refused and isinstance(body, bytes) and not body:
                pushed.oversized.add(uid)
        return pushed

    def _commands(self, last_uid: int) -> list[tuple[str, bytes]]:
        window = f"{last_uid + 1}:{last_uid + PUSH_BODIES}"
        part = min(PUSH_BODY_BYTES, self._conn.settings.stream_threshold_bytes)
        return [
            ("fetch", uid_fetch_command(f"{last_uid + 1}:*", self._items)),
            ("fetch", uid_fetch_command(window, [f"BODY.PEEK[]<0.{part}>"])),
        ]

    def _read(self, sent: Sent) -> Pipelined:
        done = self._conn.io(read_pipelined, imap_of(self._conn.client), sent)
        self._owe(done.statuses)
        if done.idle_tag is not None:
            set_idle_tag(self._conn.client, done.idle_tag)  # imapclient's idle_done ends it
            self._empty_reads, self.idling = 0, True
        return done
