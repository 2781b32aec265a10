"""``ImapMailboxSession``: one logged-in imapclient connection, INBOX read-only.

State machine: LOGGED_IN --select_inbox/fetch_since--> SELECTED (EXAMINE; every
pass of ``fetch_since`` pages EXAMINEs for a fresh UIDVALIDITY/UIDNEXT at its start and
before it answers "nothing left") --close--> CLOSED.
Any error is translated by ``errors.classify`` and raised ``from None``. After a
transient or throttling error the session is BROKEN: further calls raise
``MailboxTransientError`` at once and ``close`` only shuts the socket (no LOGOUT
round trip on a connection that may be dead); open a new session.

``fetch_since`` (the contract is in ``application.mail.ports``):

1. EXAMINE INBOX (later pages of a pass reuse the status of its first page).
   A cursor from another UIDVALIDITY → ``MailboxCursorInvalid``.
2. UIDs: a first sync (no cursor) backfills the UIDs below the UIDNEXT it
   sees (kept in the cursor as ``backfill_until`` while it pages) with
   ``UID SEARCH UID <last+1>:<backfill_until> SINCE <date>``, so mail older
   than the window is skipped for good wherever its UID lies; afterwards
   ``UID SEARCH UID <last+1>:<hi>`` in windows bounded by UIDNEXT (none when
   UIDNEXT says nothing is new), dropping the ``*`` quirk (``n:*`` with n past
   the last UID matches the last UID). UIDs are passed as lists: imapclient 4
   rejects ranges in ``fetch``.
3. Metadata for the page: ``RFC822.SIZE INTERNALDATE FLAGS`` and the
   Message-ID/Date header fields (plus EMAILID / X-GM-MSGID where offered).
4. Bodies: inline groups in one ``UID FETCH … BODY.PEEK[]`` each; big ones in
   ``BODY.PEEK[]<offset.length>`` chunks straight into the blob store; too big
   ones not at all.

A watch (``reuse_status``, after IDLE said new mail came) skips 1 and 2: DONE, the
metadata of everything after the cursor (``UID FETCH last+1:*``), the first bodies and
IDLE again go in one pipelined write (``pipeline``), sent by ``idle_read`` the moment
the news is read and answered when the watch asks (``_fetch_after_idle``). Any other
command ends a running IDLE first; ``idle_start`` reports news the server sent with
its "+ idling" (it would sit in imaplib's buffer, unseen by a selector).
"""

from __future__ import annotations

import contextlib
import dataclasses
import imaplib
import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import date
from types import TracebackType
from typing import Any, Self, TypeVar

from imapclient import IMAPClient
from imapclient.imapclient import join_message_ids, seq_to_parenstr_upper

from application.mail.ports import (
    BlobOwner,
    BlobStore,
    FetchBatch,
    FetchedMessage,
    IdleNews,
    IdleUnsupported,
    MailboxCursor,
    MailboxCursorInvalid,
    MailboxStatus,
    MailboxThrottled,
    MailboxTransientError,
    MailProviderError,
    MessageRef,
)
from infrastructure.imap.errors import classify
from infrastructure.imap.fetch_response import FetchData, parse_fetch
from infrastructure.imap.identity import HEADER_FIELDS_ITEM, message_ref
from infrastructure.imap.pipeline import (
    Pipelined,
    Sent,
    read_pipelined,
    run_pipelined,
    send_pipelined,
)
from infrastructure.imap.plan import plan_page, uid_windows
from infrastructure.imap.settings import ImapSettings

log = logging.getLogger("tidings.imap")
T = TypeVar("T")
_BODY = b"BODY[]"
_PARTIAL = b"BODY[]<0>"
# After IDLE, the bodies of the first few new messages come with their metadata, up to
# this size each (the rest is fetched as on any page): a push is usually one message.
PUSH_BODIES = 8
PUSH_BODY_BYTES = 128 * 1024


def _read_available(imap: Any) -> list[bytes]:
    """The lines imaplib can read without blocking (its buffer, then the socket)."""
    sock = imap.sock
    timeout = sock.gettimeout()
    sock.setblocking(False)
    lines: list[bytes] = []
    try:
        while True:
            try:
                lines.append(imap._get_line())
            except OSError:  # nothing more to read now
                break
            except imaplib.IMAP4.abort as error:
                if "EOF" in str(error):  # no bytes came: the caller counts empty reads
                    break
                raise
    finally:
        sock.settimeout(timeout)
    return lines


def _news(lines: list[bytes]) -> IdleNews:
    """What IDLE lines say: new mail (EXISTS/RECENT), a hang-up (BYE), anything at all."""
    exists = closed = False
    for line in lines:
        words = line.split(None, 3)
        if words[:1] != [b"*"] or len(words) < 2:
            continue
        if words[1].upper() == b"BYE":
            closed = True
        elif len(words) > 2 and words[2].rstrip().upper() in (b"EXISTS", b"RECENT"):
            exists = True
    return IdleNews(exists=exists, closed=closed, heard=bool(lines))


class _Vanished(Exception):
    """The message was expunged while we were reading it."""


class ImapMailboxSession:
    def __init__(
        self,
        client: IMAPClient,
        capabilities: frozenset[str],
        *,
        account_id: str,
        settings: ImapSettings,
        blob_store: BlobStore,
        blob_owner: BlobOwner | None = None,
    ) -> None:
        self._client = client
        self._caps = capabilities
        self._account_id = account_id
        self._settings = settings
        self._blobs = blob_store
        self._blob_owner = blob_owner
        self._closed = False
        self._broken = False
        self._idle_empty_reads = 0
        self._idling = False
        # The last backfill search: ((uidvalidity, bound, since), its lower UID, UIDs).
        self._backfill: tuple[tuple[int, int, date], int, list[int]] | None = None
        # The EXAMINE status the next page of a pass reuses (see ``fetch_since``).
        self._pass: MailboxStatus | None = None
        self._selected: MailboxStatus | None = None  # the last EXAMINE's
        # The last UID of the last page that left nothing more (what a watch's cursor
        # will say after it), and a fetch sent ahead from it when IDLE said new mail came.
        self._last_uid: int | None = None
        self._prefetch: tuple[int, Sent] | None = None
        items = ["RFC822.SIZE", "INTERNALDATE", "FLAGS", HEADER_FIELDS_ITEM]
        if "OBJECTID" in capabilities:
            items.append("EMAILID")
        if "X-GM-EXT-1" in capabilities:
            items.append("X-GM-MSGID")
        self._metadata_items = items

    @property
    def capabilities(self) -> frozenset[str]:
        return self._caps

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # While idling the server waits for DONE and would not answer a LOGOUT: drop
        # the socket instead (a dropped connection costs the server nothing).
        if not self._broken and not self._idling and self._prefetch is None:
            with contextlib.suppress(Exception):
                self._client.logout()
                return
        with contextlib.suppress(Exception):
            self._client.shutdown()

    # -- IDLE --------------------------------------------------------------

    def idle_start(self) -> IdleNews:
        # A fetch sent ahead that nobody took: IDLE runs again after it, and the mail it
        # was for is still news.
        early = self._settle_prefetch()
        if not self._idling:  # a watch's fetch may have gone back to IDLE already
            if "IDLE" not in self._caps:
                raise IdleUnsupported("the server does not offer IDLE")
            self._pass = None  # a pass never spans an IDLE
            entered = self._io(run_pipelined, self._client._imap, [], None, True)
            self._client._idle_tag = entered.idle_tag  # imapclient's ``idle_done`` ends it
            self._idle_empty_reads, self._idling = 0, True
            early = entered.news_after_done  # announced before "+ idling"
        # Mail that came while the session was outside IDLE is announced the moment IDLE
        # begins, often in the same packet as "+ idling": then it already sits in
        # imaplib's buffer, and a selector waiting on the socket would never see it.
        news = _news(self._io(_read_available, self._client._imap))
        return dataclasses.replace(news, exists=news.exists or early)

    def idle_fileno(self) -> int:
        return int(self._client._imap.sock.fileno())

    def idle_read(self) -> IdleNews:
        """Called when the socket is readable. A readable socket that yields no
        response twice in a row has reached EOF (the server closed it).

        Reads imaplib's buffered lines itself: imapclient's ``idle_check`` polls the
        socket again and runs every line through its response lexer, which costs a
        multiplexer serving thousands of watches more than the news is worth; all we
        need to know is whether EXISTS (new mail) or BYE came."""
        lines = self._io(_read_available, self._client._imap)
        if not lines:
            self._idle_empty_reads += 1
            return IdleNews(closed=self._idle_empty_reads >= 2)
        self._idle_empty_reads = 0
        news = _news(lines)
        if news.exists and not news.closed:
            self._send_ahead()
        return news

    def _send_ahead(self) -> None:
        """New mail: send the fetch a watch will ask for (``_fetch_after_idle``) now, from
        the cursor the last page left, so the server works on it while the fetch waits
        for a thread. A cursor that turns out different only costs reading it unused."""
        last = self._last_uid
        if last is None or self._prefetch is not None or not self._idling:
            return
        sent = self._io(
            send_pipelined,
            self._client._imap,
            self._after_idle_commands(last),
            self._client._idle_tag,
            True,
        )
        self._prefetch, self._idling = (last, sent), False

    def _settle_prefetch(self) -> bool:
        """Read a fetch sent ahead and not taken (the session is idling after it)."""
        if self._prefetch is None:
            return False
        _, sent = self._prefetch
        self._prefetch = None
        self._read_pipelined(sent)
        return True

    def idle_done(self) -> None:
        self._settle_prefetch()
        if not self._idling:
            return
        self._idling = False
        self._io(self._client.idle_done)

    def verify(self) -> None:
        self.select_inbox()

    def select_inbox(self) -> MailboxStatus:
        self.idle_done()  # any command ends a running IDLE first
        resp = self._io(self._client.select_folder, "INBOX", True)
        uidvalidity = resp.get(b"UIDVALIDITY")
        if not isinstance(uidvalidity, int):
            raise self._fail(MailboxTransientError("EXAMINE INBOX gave no UIDVALIDITY"))
        uidnext = resp.get(b"UIDNEXT")
        modseq = resp.get(b"HIGHESTMODSEQ")
        exists = resp.get(b"EXISTS")
        self._selected = MailboxStatus(
            uidvalidity=uidvalidity,
            uidnext=uidnext if isinstance(uidnext, int) else None,
            highestmodseq=modseq if isinstance(modseq, int) else None,
            exists=exists if isinstance(exists, int) else 0,
        )
        return self._selected

    def fetch_since(
        self,
        cursor: MailboxCursor | None,
        *,
        backfill_since: date,
        limit: int,
        reuse_status: bool = False,
    ) -> FetchBatch:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        # EXAMINE re-opens the mailbox (~25 ms at 10,000 messages, growing with it), so
        # the pages of one pass after the first reuse its status, and so does a watch
        # (``reuse_status``). That is safe: UIDs are always searched, never assumed, and
        # the last search of a pass is open-ended (``uid_windows``); a backfill's bound
        # cannot grow. Only a poll's "nothing left" is not taken from a reused status:
        # that answer comes from a fresh EXAMINE, as before.
        reused, after_idle = self._pass, False
        if reused is None and reuse_status and self._selected is not None:
            # IDLE said mail came after that EXAMINE: its UIDNEXT is stale. The first
            # page takes the new mail in one pipelined exchange; later pages search on.
            reused, after_idle = dataclasses.replace(self._selected, uidnext=None), True
        self._pass = None
        if reused is not None and (cursor is None or cursor.uidvalidity != reused.uidvalidity):
            reused, after_idle = None, False
        if not after_idle:
            self.idle_done()
        status = reused or self.select_inbox()
        batch = self._fetch_page(status, cursor, backfill_since, limit, after_idle=after_idle)
        if reused is not None and not reuse_status and not batch.messages and not batch.has_more:
            status = self.select_inbox()
            batch = self._fetch_page(status, cursor, backfill_since, limit)
        if batch.has_more:
            self._pass = status
        self._last_uid = None if batch.has_more else batch.new_cursor.last_uid
        return batch

    def _fetch_page(
        self,
        status: MailboxStatus,
        cursor: MailboxCursor | None,
        backfill_since: date,
        limit: int,
        *,
        after_idle: bool = False,
    ) -> FetchBatch:
        if cursor is not None and cursor.uidvalidity != status.uidvalidity:
            raise self._fail(
                MailboxCursorInvalid(
                    "UIDVALIDITY changed", expected=cursor.uidvalidity, actual=status.uidvalidity
                )
            )
        if cursor is None:
            cursor = MailboxCursor(
                status.uidvalidity, 0, None, backfill_until=self._backfill_bound(status)
            )
        uids: list[int] = []
        known: dict[int, MessageRef] = {}  # metadata fetched without a SEARCH first
        bodies: dict[int, bytes] = {}  # and the bodies that came with it
        backfill = cursor.backfill_until
        if backfill is not None and cursor.last_uid < backfill:
            lo = cursor.last_uid + 1
            uids = self._backfill_uids(status.uidvalidity, lo, backfill, backfill_since)
        if uids:
            more_windows, covered = False, backfill or 0
        else:  # no backfill, or nothing left of it: continue after it by UID
            last = max(cursor.last_uid, backfill or 0)
            cursor = MailboxCursor(status.uidvalidity, last, cursor.highestmodseq)
            backfill = None
            if after_idle:
                known, bodies, more_windows = self._fetch_after_idle(last)
                uids, covered = sorted(known), max(known, default=last)
            else:
                uids, more_windows, covered = self._search_after(last, status.uidnext)
        page = uids[:limit]
        if not page:
            last = max(covered, cursor.last_uid)
            new = MailboxCursor(status.uidvalidity, last, status.highestmodseq)
            return FetchBatch((), new, has_more=more_windows)
        refs = [known[uid] for uid in page] if known else self._fetch_metadata(page)
        plan = plan_page(refs, self._settings)
        messages = self._fetch_bodies(plan.included, plan.inline_groups, bodies)
        # The page ends at its last UID, including UIDs that vanished meanwhile.
        last_uid = plan.included[-1].uid if plan.cut else page[-1]
        has_more = plan.cut or len(uids) > limit or more_windows
        if backfill is not None and not has_more:
            # The backfill is done: the older mail below its bound is skipped for good.
            last_uid, backfill = max(last_uid, backfill), None
        modseq = cursor.highestmodseq if has_more else status.highestmodseq
        log.debug(
            "imap.batch account_id=%s messages=%d streamed=%d too_large=%d has_more=%s",
            self._account_id,
            len(messages),
            len(plan.streamed),
            len(plan.too_large),
            has_more,
        )
        new_cursor = MailboxCursor(
            status.uidvalidity, last_uid, modseq, backfill_until=backfill if has_more else None
        )
        return FetchBatch(tuple(messages), new_cursor, has_more)

    def _backfill_bound(self, status: MailboxStatus) -> int:
        """The highest UID a first sync backfills: everything that exists now."""
        if status.uidnext is not None:
            return status.uidnext - 1
        return max(self._search(["ALL"], floor=1), default=0)

    # -- search ------------------------------------------------------------

    def _backfill_uids(self, uidvalidity: int, lo: int, backfill: int, since: date) -> list[int]:
        """UIDs in ``lo..backfill`` whose INTERNALDATE is on or after ``since``. A backfill
        pages through one set of UIDs that cannot grow (new mail gets UIDs above the
        bound; dates never change), so the search runs once per session and later pages
        take the rest of its answer (re-searching ``lo:bound`` for every page of a big
        mailbox returned, and parsed, the whole remainder every time)."""
        key = (uidvalidity, backfill, since)
        if self._backfill is None or self._backfill[0] != key or lo < self._backfill[1]:
            found = self._search(["UID", f"{lo}:{backfill}", "SINCE", since], lo)
            self._backfill = (key, lo, [u for u in found if u <= backfill])
        return [u for u in self._backfill[2] if u >= lo]

    def _search(self, criteria: list[Any], floor: int) -> list[int]:
        self.idle_done()
        found = self._io(self._client.search, criteria)
        return sorted({int(u) for u in found if int(u) >= floor})

    def _search_after(self, last_uid: int, uidnext: int | None) -> tuple[list[int], bool, int]:
        """UIDs above ``last_uid``, whether windows remain unsearched, and how far we looked."""
        windows = uid_windows(last_uid + 1, uidnext, self._settings.search_span)
        for i, (lo, hi) in enumerate(windows):
            uids = self._search(["UID", f"{lo}:{hi if hi is not None else '*'}"], floor=lo)
            if uids:
                return uids, i < len(windows) - 1, uids[-1]
        return [], False, (uidnext - 1) if uidnext else last_uid

    # -- fetch -------------------------------------------------------------

    def _fetch_metadata(self, uids: Sequence[int]) -> list[MessageRef]:
        refs: list[MessageRef] = []
        step = self._settings.metadata_group
        for start in range(0, len(uids), step):
            group = list(uids[start : start + step])
            resp = self._io(self._uid_fetch, group, self._metadata_items)
            refs.extend(message_ref(uid, resp[uid]) for uid in group if uid in resp)
        return refs

    def _fetch_bodies(
        self,
        refs: Sequence[MessageRef],
        inline_groups: Sequence[Sequence[int]],
        fetched: dict[int, bytes],
    ) -> list[FetchedMessage]:
        inline = dict(fetched)
        for whole_group in inline_groups:
            group = [uid for uid in whole_group if uid not in inline]
            if not group:
                continue
            resp = self._io(self._uid_fetch, group, ["BODY.PEEK[]"])
            for uid in group:
                body = resp.get(uid, {}).get(_BODY)
                if isinstance(body, bytes):
                    inline[uid] = body
        out: list[FetchedMessage] = []
        for ref in refs:
            if ref.size > self._settings.max_message_bytes:
                out.append(FetchedMessage(ref))
            elif ref.size > self._settings.stream_threshold_bytes:
                blob_ref = self._stream_to_blob(ref.uid)
                if blob_ref is not None:
                    out.append(FetchedMessage(ref, blob_ref=blob_ref))
            elif ref.uid in inline:
                out.append(FetchedMessage(ref, raw=inline.pop(ref.uid)))
        return out

    def _stream_to_blob(self, uid: int) -> str | None:
        try:
            return self._blobs.put_stream(self._chunks(uid), owner=self._blob_owner)
        except _Vanished:
            return None

    def _chunks(self, uid: int) -> Iterator[bytes]:
        size = self._settings.chunk_bytes
        offset = 0
        while True:
            item = f"BODY.PEEK[]<{offset}.{size}>"
            resp = self._io(self._uid_fetch, [uid], [item])
            if uid not in resp:
                raise _Vanished
            data = resp[uid].get(f"BODY[]<{offset}>".encode())
            data = data if isinstance(data, bytes) else b""
            if data:
                yield data
            offset += len(data)
            if len(data) < size:
                return

    def _fetch_after_idle(
        self, last_uid: int
    ) -> tuple[dict[int, MessageRef], dict[int, bytes], bool]:
        """A watch's fetch after IDLE said new mail came (usually a handful of messages),
        in one pipelined exchange (``pipeline``): [DONE], the metadata of everything
        above ``last_uid`` (``UID FETCH last+1:*``, no SEARCH), the bodies of the first
        few of them, [IDLE again] — the brackets when the session was idling. Usually
        sent already, when the news came (``_send_ahead``). Returns the metadata, the
        complete bodies, and whether mail came meanwhile (the caller looks again)."""
        prefetched, self._prefetch = self._prefetch, None
        if prefetched is not None and prefetched[0] != last_uid:
            self._read_pipelined(prefetched[1])  # sent from another cursor: not this fetch
            prefetched = None
        if prefetched is not None:
            sent = prefetched[1]
        else:
            was_idling, self._idling = self._idling, False
            sent = self._io(
                send_pipelined,
                self._client._imap,
                self._after_idle_commands(last_uid),
                self._client._idle_tag if was_idling else None,
                was_idling,
            )
        done = self._read_pipelined(sent)
        resp = parse_fetch(done.fetched, normalise_times=self._client.normalise_times)
        # ``n:*`` past the last UID answers the last message: keep only what is new, and
        # only answers to this FETCH (news of flag changes carries no RFC822.SIZE).
        known = {
            uid: message_ref(uid, item)
            for uid, item in resp.items()
            if uid > last_uid and b"RFC822.SIZE" in item
        }
        bodies = {}
        for uid, ref in known.items():
            body = resp[uid].get(_PARTIAL)
            if isinstance(body, bytes) and len(body) == ref.size:  # the whole message
                bodies[uid] = body
        return known, bodies, done.news_after_done

    def _after_idle_commands(self, last_uid: int) -> list[tuple[str, bytes]]:
        window = f"{last_uid + 1}:{last_uid + PUSH_BODIES}"
        part = min(PUSH_BODY_BYTES, self._settings.stream_threshold_bytes)
        return [
            ("fetch", _uid_fetch_command(f"{last_uid + 1}:*", self._metadata_items)),
            ("fetch", _uid_fetch_command(window, [f"BODY.PEEK[]<0.{part}>"])),
        ]

    def _read_pipelined(self, sent: Sent) -> Pipelined:
        done = self._io(read_pipelined, self._client._imap, sent)
        if done.idle_tag is not None:
            self._client._idle_tag = done.idle_tag  # imapclient's ``idle_done`` ends it
            self._idle_empty_reads, self._idling = 0, True
        return done

    def _uid_fetch(self, uids: list[int] | str, items: list[str]) -> FetchData:
        """``IMAPClient.fetch`` (same command, same answer) with the fast response parser:
        imapclient's own lexer cost more CPU than anything else in mail ingestion."""
        if not uids:
            return {}
        self.idle_done()
        client = self._client
        imap = client._imap
        tag = imap._command("UID", "FETCH", join_message_ids(uids), seq_to_parenstr_upper(items))
        typ, data = imap._command_complete("FETCH", tag)
        client._checkok("fetch", typ, data)
        typ, data = imap._untagged_response(typ, data, "FETCH")
        resp = parse_fetch(data, normalise_times=client.normalise_times)
        if isinstance(uids, str):  # a range: whatever it matched
            return resp
        # Only the messages asked for: a FETCH may also bring news of others.
        return {uid: resp[uid] for uid in uids if uid in resp}

    # -- errors ------------------------------------------------------------

    def _io(self, fn: Callable[..., T], *args: Any) -> T:
        if self._broken or self._closed:
            raise MailboxTransientError("session unusable after an earlier failure or close")
        try:
            return fn(*args)
        except MailProviderError as exc:
            raise self._fail(exc) from None
        except Exception as exc:
            raise self._fail(classify(exc), cause=exc) from None

    def _fail(
        self, err: MailProviderError, cause: BaseException | None = None
    ) -> MailProviderError:
        if isinstance(err, MailboxTransientError | MailboxThrottled):
            self._broken = True  # the connection's state is unknown: drop it
        log.warning(
            "imap.error account_id=%s error_class=%s cause=%s",
            self._account_id,
            type(err).__name__,
            type(cause).__name__ if cause else "-",
        )
        return err


def _uid_fetch_command(uids: str, items: list[str]) -> bytes:
    return f"UID FETCH {uids} {seq_to_parenstr_upper(items)}".encode()
