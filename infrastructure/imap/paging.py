"""``Pager``: the paging protocol of a session — EXAMINE, search, metadata, bodies.

One page after a cursor (``page``; the contract is in ``application.mail.ports``):

1. The caller passes the EXAMINE status (``select``). A cursor from another
   UIDVALIDITY → ``MailboxCursorInvalid``.
2. UIDs: a first sync (no cursor) backfills the UIDs below the UIDNEXT it sees (kept
   in the cursor as ``backfill_until`` while it pages) with
   ``UID SEARCH UID <last+1>:<backfill_until> SINCE <date>``, so mail older than the
   window is skipped for good wherever its UID lies; afterwards
   ``UID SEARCH UID <last+1>:<hi>`` in windows bounded by UIDNEXT (none when UIDNEXT
   says nothing is new), dropping the ``*`` quirk (``n:*`` with n past the last UID
   matches the last UID). UIDs are passed as lists: imapclient 4 rejects ranges in
   ``fetch``. A watch's page after IDLE takes its UIDs and metadata from the IDLE
   side's pipelined fetch instead (``after_idle``).
3. Metadata for the page: ``RFC822.SIZE INTERNALDATE FLAGS`` and the Message-ID/Date
   header fields (plus EMAILID / X-GM-MSGID where offered).
4. Bodies: inline groups in one ``UID FETCH … BODY.PEEK[]`` each; big ones in
   ``BODY.PEEK[]<offset.length>`` chunks straight into the blob store; too big ones
   not at all. Past the account's download budget (``DownloadMeter``) a body is
   deferred: its message comes with its header block only (``BODY.PEEK[HEADER]``) and
   the cursor moves past it; ``deferred_bodies`` fetches such bodies later by UID.

Server values are data: UIDs and UIDVALIDITY outside 1…2^32 - 1, sizes and dates out
of range (``identity.refusal``) and FETCH answers that cannot be parsed skip their
message with a logged reason; the page's cursor still moves past it. A literal refused
for its size (``wire``) makes its message ``too_large`` (metadata only).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol

from application.mail.ports import (
    BlobOwner,
    BlobStore,
    DeferredFetch,
    DownloadMeter,
    FetchBatch,
    FetchedMessage,
    MailboxCursor,
    MailboxCursorInvalid,
    MailboxStatus,
    MailboxTransientError,
    MessageRef,
)
from infrastructure.imap.connection import Connection
from infrastructure.imap.fetch_response import FetchData, parse_fetch
from infrastructure.imap.identity import (
    ID_MAX,
    MODSEQ_MAX,
    message_ref,
    refusal,
    valid_id,
)
from infrastructure.imap.plan import plan_page
from infrastructure.imap.search import UidSearch
from infrastructure.imap.wire import mend_refused, uid_fetch_lines

log = logging.getLogger("tidings.imap")
_BODY = b"BODY[]"


@dataclass(slots=True)
class Pushed:
    """What a watch's pipelined fetch after IDLE brought (``idle.IdleChannel``)."""

    known: dict[int, MessageRef]  # the metadata of every new message
    bodies: dict[int, bytes]  # the complete bodies that came with it
    more: bool  # mail came meanwhile: the caller looks again
    oversized: set[int] = field(default_factory=set)  # literals refused: too_large


class Unparseable(Exception):
    """A FETCH answer neither parser reads: its messages are skipped."""


class _Vanished(Exception):
    """The message was expunged while we were reading it."""


class Pager:
    def __init__(
        self,
        conn: Connection,
        *,
        metadata_items: list[str],
        blob_store: BlobStore,
        blob_owner: BlobOwner | None,
        leave_idle: Callable[[], None],
        meter: DownloadMeter | None = None,
    ) -> None:
        self._meter = meter  # the account's daily download budget, if its provider has one
        self._conn = conn
        self._settings = conn.settings
        self._items = metadata_items
        self._blobs = blob_store
        self._blob_owner = blob_owner
        self._leave_idle = leave_idle  # any command ends a running IDLE first
        self._uids = UidSearch(conn, leave_idle)
        self._oversized: set[int] = set()  # this page's messages with a refused literal
        self._refused = 0  # literals refused since the caller last looked (``uid_fetch``)

    def all_uids(self) -> list[int]:
        """Every UID of the selected folder (``UID SEARCH ALL``), sorted, in range."""
        return self._uids.search(["ALL"], floor=1)

    def select(self, folder: str = "INBOX") -> MailboxStatus:
        """EXAMINE ``folder`` (INBOX unless told); its status with every value range-checked."""
        self._leave_idle()
        conn = self._conn
        resp = conn.io(conn.client.select_folder, folder, True)
        uidvalidity = resp.get(b"UIDVALIDITY")
        if not isinstance(uidvalidity, int):
            raise conn.fail(MailboxTransientError("EXAMINE gave no UIDVALIDITY"))
        if not valid_id(uidvalidity):
            raise conn.fail(MailboxTransientError("EXAMINE gave a UIDVALIDITY out of range"))
        uidnext = resp.get(b"UIDNEXT")
        modseq = resp.get(b"HIGHESTMODSEQ")
        exists = resp.get(b"EXISTS")
        return MailboxStatus(
            uidvalidity=uidvalidity,
            # UIDNEXT may be one past the largest UID; anything else is not believed.
            uidnext=uidnext if valid_id(uidnext) or uidnext == ID_MAX + 1 else None,
            highestmodseq=modseq if type(modseq) is int and 0 < modseq <= MODSEQ_MAX else None,
            exists=exists if type(exists) is int and 0 <= exists <= ID_MAX else 0,
        )

    def page(
        self,
        status: MailboxStatus,
        cursor: MailboxCursor | None,
        backfill_since: date,
        limit: int,
        *,
        after_idle: Callable[[int], Pushed] | None = None,
    ) -> FetchBatch:
        if cursor is not None and cursor.uidvalidity != status.uidvalidity:
            raise self._conn.fail(
                MailboxCursorInvalid(
                    "UIDVALIDITY changed", expected=cursor.uidvalidity, actual=status.uidvalidity
                )
            )
        if cursor is None:
            cursor = MailboxCursor(
                status.uidvalidity, 0, None, backfill_until=self._uids.backfill_bound(status)
            )
        self._oversized = set()
        uids: list[int] = []
        known: dict[int, MessageRef] = {}  # metadata fetched without a SEARCH first
        bodies: dict[int, bytes] = {}  # and the bodies that came with it
        backfill = cursor.backfill_until
        if backfill is not None and cursor.last_uid < backfill:
            lo = cursor.last_uid + 1
            uids = self._uids.backfill_uids(status.uidvalidity, lo, backfill, backfill_since)
        if uids:
            more_windows, covered = False, backfill or 0
        else:  # no backfill, or nothing left of it: continue after it by UID
            last = max(cursor.last_uid, backfill or 0)
            cursor = MailboxCursor(status.uidvalidity, last, cursor.highestmodseq)
            backfill = None
            # Past the budget, no body is fetched ahead with the new mail's metadata.
            spent = self._meter is not None and self._meter.allowance() <= 0
            pushed = None if spent else self._pushed(after_idle, last)
            if pushed is not None:
                known, bodies, more_windows = pushed.known, pushed.bodies, pushed.more
                self._oversized = pushed.oversized
                uids, covered = sorted(known), max(known, default=last)
            else:
                uids, more_windows, covered = self._uids.after(last, status.uidnext)
        page = uids[:limit]
        if not page:
            last = max(covered, cursor.last_uid)
            new = MailboxCursor(status.uidvalidity, last, status.highestmodseq)
            return FetchBatch((), new, has_more=more_windows)
        refs = [known[uid] for uid in page] if known else self._fetch_metadata(page)
        later: set[int] = set()  # past the budget: metadata first, the body another day
        if self._meter is not None:
            self._meter.spend(sum(len(body) for body in bodies.values()))  # pushed with IDLE
            later = self._unaffordable(refs, bodies, self._meter.allowance())
        plan = plan_page([ref for ref in refs if ref.uid not in later], self._settings)
        # The page ends at its last UID, including UIDs that vanished meanwhile; a page cut
        # for its size ends at its last message, and the rest (deferred ones too) waits.
        last_uid = plan.included[-1].uid if plan.cut else page[-1]
        messages = self._fetch_bodies(plan.included, plan.inline_groups, bodies)
        deferred = [ref for ref in refs if ref.uid in later and ref.uid <= last_uid]
        if deferred:
            log.info(
                "imap.bodies_deferred account_id=%s messages=%d",
                self._conn.account_id,
                len(deferred),
            )
            messages = sorted([*messages, *self._headers_only(deferred)], key=_uid)
        has_more = plan.cut or len(uids) > limit or more_windows
        if backfill is not None and not has_more:
            # The backfill is done: the older mail below its bound is skipped for good.
            last_uid, backfill = max(last_uid, backfill), None
        modseq = cursor.highestmodseq if has_more else status.highestmodseq
        log.debug(
            "imap.batch account_id=%s messages=%d streamed=%d too_large=%d has_more=%s",
            self._conn.account_id,
            len(messages),
            len(plan.streamed),
            len(plan.too_large) + len(self._oversized),
            has_more,
        )
        new_cursor = MailboxCursor(
            status.uidvalidity,
            last_uid,
            modseq,
            backfill_until=backfill if has_more else None,
        )
        return FetchBatch(tuple(messages), new_cursor, has_more)

    def deferred_bodies(
        self, status: MailboxStatus, uids: Sequence[int], uidvalidity: int
    ) -> DeferredFetch:
        """The bodies of deferred messages by UID (``MailboxSession.fetch_deferred``)."""
        if status.uidvalidity != uidvalidity:
            return DeferredFetch((), (), status.uidvalidity)
        self._oversized = set()
        wanted = sorted({uid for uid in uids if valid_id(uid)})
        refs = self._fetch_metadata(wanted)
        present = {ref.uid for ref in refs}
        gone = tuple(uid for uid in wanted if uid not in present)
        if self._meter is not None:
            later = self._unaffordable(refs, {}, self._meter.allowance())
            refs = [ref for ref in refs if ref.uid not in later]
        plan = plan_page(refs, self._settings)
        messages = self._fetch_bodies(plan.included, plan.inline_groups, {})
        return DeferredFetch(tuple(messages), gone, status.uidvalidity)

    def _unaffordable(
        self, refs: Sequence[MessageRef], pushed: dict[int, bytes], allowance: int
    ) -> set[int]:
        """The UIDs of ``refs`` (in UID order) whose bodies wait for the budget: bodies are
        fetched while the bytes spent stay under its ``allowance``; a body already here
        (pushed with IDLE) or never fetched (over the size cap) costs nothing."""
        spent = 0
        later: set[int] = set()
        for ref in refs:
            if ref.uid in pushed or ref.size > self._settings.max_message_bytes:
                continue
            if spent >= allowance:
                later.add(ref.uid)
            else:
                spent += max(0, ref.size)
        return later

    def _headers_only(self, refs: Sequence[MessageRef]) -> list[FetchedMessage]:
        """Deferred messages with their header block (``BODY.PEEK[HEADER]``, counted against
        the budget like any download): what a message shows before its body comes."""
        headers: dict[int, bytes] = {}
        step = self._settings.metadata_group
        for start in range(0, len(refs), step):
            group = [ref.uid for ref in refs[start : start + step]]
            self._refused = 0
            resp = self._fetch_each(group, ["BODY.PEEK[HEADER]"])
            refused = self._refused  # a header block refused for its size: none is shown
            for uid in group:
                block = resp.get(uid, {}).get(b"BODY[HEADER]")
                if isinstance(block, bytes) and not refused:
                    headers[uid] = block
            if self._meter is not None:
                self._meter.spend(sum(len(headers.get(uid, b"")) for uid in group))
        return [FetchedMessage(ref, deferred=True, header=headers.get(ref.uid)) for ref in refs]

    def _pushed(self, after_idle: Callable[[int], Pushed] | None, last: int) -> Pushed | None:
        if after_idle is None:
            return None
        try:
            return after_idle(last)
        except Unparseable:  # the server's answer: search and fetch the ordinary way
            log.warning("imap.push_unparseable account_id=%s", self._conn.account_id)
            return None

    # -- fetch -------------------------------------------------------------

    def _fetch_metadata(self, uids: Sequence[int]) -> list[MessageRef]:
        refs: list[MessageRef] = []
        step = self._settings.metadata_group
        for start in range(0, len(uids), step):
            group = list(uids[start : start + step])
            self._refused = 0
            resp = self._fetch_each(group, self._items)
            refused = self._refused
            for uid in group:
                item = resp.get(uid)
                if item is None:
                    continue
                reason = refusal(item)
                if reason is not None:
                    self._conn.skipped(uid, reason)
                    continue
                ref = message_ref(uid, item)
                if refused and not _has_header(item):
                    self._oversized.add(uid)
                refs.append(ref)
        return refs

    def _fetch_bodies(  # noqa: C901, PLR0912
        self,
        refs: Sequence[MessageRef],
        inline_groups: Sequence[Sequence[int]],
        fetched: dict[int, bytes],
    ) -> list[FetchedMessage]:
        inline = dict(fetched)
        sizes = {ref.uid: ref.size for ref in refs}
        for whole_group in inline_groups:
            group = [u for u in whole_group if u not in inline and u not in self._oversized]
            if not group:
                continue
            self._refused = 0
            resp = self._fetch_each(group, ["BODY.PEEK[]"])
            refused = self._refused
            for uid in group:
                body = resp.get(uid, {}).get(_BODY)
                if not isinstance(body, bytes):
                    continue
                if refused and len(body) != sizes[uid]:
                    self._oversized.add(uid)  # its literal was refused: metadata only
                else:
                    inline[uid] = body
            if self._meter is not None:
                self._meter.spend(sum(len(inline.get(uid, b"")) for uid in group))
        out: list[FetchedMessage] = []
        for ref in refs:
            if ref.size > self._settings.max_message_bytes or ref.uid in self._oversized:
                out.append(FetchedMessage(ref))
            elif ref.size > self._settings.stream_threshold_bytes:
                digest = hashlib.sha256()
                blob_ref = self._stream_to_blob(ref.uid, digest)
                if blob_ref is not None:
                    out.append(
                        FetchedMessage(ref, blob_ref=blob_ref, streamed_sha256=digest.digest())
                    )
                elif ref.uid in self._oversized:
                    out.append(FetchedMessage(ref))
            elif ref.uid in inline:
                out.append(FetchedMessage(ref, raw=inline.pop(ref.uid)))
        return out

    def _stream_to_blob(self, uid: int, digest: Hash) -> str | None:
        """Stream the body to the blob store, hashing its bytes into ``digest``."""
        try:
            return self._blobs.put_stream(hashed(self._chunks(uid), digest), owner=self._blob_owner)
        except _Vanished:
            return None
        except Unparseable:
            self._conn.skipped(uid, "fetch_unparseable")
            return None

    def _chunks(self, uid: int) -> Iterator[bytes]:
        size = self._settings.chunk_bytes
        offset = 0
        while True:
            item = f"BODY.PEEK[]<{offset}.{size}>"
            self._refused = 0
            resp = self.uid_fetch([uid], [item])
            if self._refused:
                self._oversized.add(uid)
                raise _Vanished  # a chunk larger than asked for: nothing is stored
            if uid not in resp:
                raise _Vanished
            data = resp[uid].get(f"BODY[]<{offset}>".encode())
            data = data if isinstance(data, bytes) else b""
            if self._meter is not None:
                self._meter.spend(len(data))
            if data:
                yield data
            offset += len(data)
            if len(data) < size:
                return

    def _fetch_each(self, uids: list[int], items: list[str]) -> FetchData:
        """``uid_fetch``; an answer that cannot be parsed is asked again one message at a
        time, and a message whose own answer cannot be parsed is skipped."""
        try:
            return self.uid_fetch(uids, items)
        except Unparseable:
            if len(uids) == 1:
                self._conn.skipped(uids[0], "fetch_unparseable")
                return {}
        out: FetchData = {}
        for uid in uids:
            out.update(self._fetch_each([uid], items))
        return out

    def uid_fetch(self, uids: list[int] | str, items: list[str]) -> FetchData:
        """``IMAPClient.fetch`` (same command, same answer) with the fast response parser:
        imapclient's own lexer costs more CPU than anything else in mail ingestion."""
        if not uids:
            return {}
        self._leave_idle()
        client = self._conn.client
        data = self._conn.io(uid_fetch_lines, client, uids, items)
        refused = self._conn.take_refused()
        if refused:
            self._refused += refused
            data = mend_refused(data)
        try:
            resp = parse_fetch(data, normalise_times=client.normalise_times)
        except Exception:  # imapclient's parser refused it: the server's data, not ours
            raise Unparseable from None
        if isinstance(uids, str):  # a range: whatever it matched
            return {uid: item for uid, item in resp.items() if valid_id(uid)}
        # Only the messages asked for: a FETCH may also bring news of others.
        return {uid: resp[uid] for uid in uids if uid in resp}


def _uid(message: FetchedMessage) -> int:
    return message.uid


def _has_header(item: dict[bytes, Any]) -> bool:
    return any(
        key.startswith(b"BODY[HEADER.FIELDS") and isinstance(value, bytes) and value
        for key, value in item.items()
    )


class Hash(Protocol):
    def update(self, data: bytes, /) -> None: ...


def hashed(chunks: Iterator[bytes], digest: Hash) -> Iterator[bytes]:
    """``chunks`` as they are, each added to ``digest`` on its way through."""
    for chunk in chunks:
        digest.update(chunk)
        yield chunk
