"""``ImapMailboxSession``: one logged-in imapclient connection, its folders read-only.

State machine: LOGGED_IN --select_inbox/fetch_since--> SELECTED (EXAMINE; every pass
of ``fetch_since`` pages EXAMINEs for a fresh UIDVALIDITY/UIDNEXT at its start and
before it answers "nothing left") --close--> CLOSED. ``fetch_folder`` EXAMINEs another
folder (the poll's folder pass); the next INBOX call EXAMINEs INBOX again. After a
transient or throttling error the session is BROKEN (``connection``): open a new one.

The session joins two protocols on one connection, each in its own module: paging
(``paging.Pager``: EXAMINE, search, metadata, bodies, streaming) and IDLE
(``idle.IdleChannel``: IDLE, send-ahead, the after-IDLE fetch). What it decides itself
is which EXAMINE status a page uses: the pages of one pass after the first reuse the
status of its first page, and so does a watch's ``fetch_after_idle``. That is safe:
UIDs are always searched, never assumed, and the last search of a pass is open-ended
(``plan.uid_windows``); a backfill's bound cannot grow. Only a poll's "nothing left" is
not taken from a reused status: that answer comes from a fresh EXAMINE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import date
from types import TracebackType
from typing import Any, Self

from application.mail.flag_state import FlagCursor, FlagRead, FlagWindow
from application.mail.folder_listing import FolderListing, FolderStatus
from application.mail.gmail_labels import FolderLabels
from application.mail.membership import FolderUids
from application.mail.ports import (
    BlobOwner,
    BlobStore,
    DeferredFetch,
    DownloadMeter,
    FetchBatch,
    IdleNews,
    MailboxCursor,
    MailboxStatus,
)
from application.mail.resync import Resynced
from infrastructure.imap import sent
from infrastructure.imap.connection import Connection
from infrastructure.imap.exists import folder_exists
from infrastructure.imap.fetch_response import FetchData
from infrastructure.imap.flags import read_flags
from infrastructure.imap.folders import folder_statuses, list_folders
from infrastructure.imap.identity import HEADER_FIELDS_ITEM, provider_message_id, refusal
from infrastructure.imap.idle import IdleChannel
from infrastructure.imap.labels import read_labels
from infrastructure.imap.paging import Pager
from infrastructure.imap.qresync import resync
from infrastructure.imap.settings import ImapAdapterSettings
from infrastructure.imap.wire import Wire


class ImapMailboxSession:
    def __init__(
        self,
        client: Any,
        capabilities: frozenset[str],
        *,
        account_id: str,
        settings: ImapAdapterSettings,
        blob_store: BlobStore,
        blob_owner: BlobOwner | None = None,
        wire: Wire | None = None,
        meter: DownloadMeter | None = None,
        qresync: bool = False,
    ) -> None:
        self._client = client
        self._qresync = qresync  # ENABLEd at login (a poll's session only)
        self._caps = capabilities
        items = ["RFC822.SIZE", "INTERNALDATE", "FLAGS", HEADER_FIELDS_ITEM]
        if "OBJECTID" in capabilities:
            items.append("EMAILID")
        if "X-GM-EXT-1" in capabilities:
            items.append("X-GM-MSGID")
        self._metadata_items = items
        self._conn = Connection(client, account_id=account_id, settings=settings, wire=wire)
        self._idle = IdleChannel(self._conn, capabilities, items)
        self._pager = Pager(
            self._conn,
            metadata_items=items,
            blob_store=blob_store,
            blob_owner=blob_owner,
            leave_idle=self._idle.done,
            meter=meter,
        )
        # The EXAMINE status the next page of a pass reuses, and the last EXAMINE's.
        self._pass: MailboxStatus | None = None
        self._selected: MailboxStatus | None = None
        self._selected_since_idle = False  # the last EXAMINE came after the last IDLE
        # Each folder's first EXAMINE status in this session (``examined``).
        self._examined: dict[str, MailboxStatus] = {}

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
        # While idling the server waits for DONE and would not answer a LOGOUT: drop
        # the socket instead (a dropped connection costs the server nothing).
        self._conn.close(logout=not self._idle.busy)

    # -- IDLE --------------------------------------------------------------

    def idle_start(self) -> IdleNews:
        # A fetch sent ahead that nobody took: IDLE runs again after it, and the mail it
        # was for is still news.
        early = self._idle.settle()
        return self._idle.start(early, on_enter=self._end_pass)

    def _end_pass(self) -> None:
        self._pass = None  # a pass never spans an IDLE
        self._selected_since_idle = False

    def idle_fileno(self) -> int:
        return self._idle.fileno()

    def idle_read(self) -> IdleNews:
        return self._idle.read()

    def idle_done(self) -> None:
        self._idle.done()

    def idle_probe(self) -> None:
        self._idle.probe()

    # -- paging ------------------------------------------------------------

    def verify(self) -> None:
        self.select_inbox()

    def _examine(self, folder: str = "INBOX") -> MailboxStatus:
        status = self._pager.select(folder)
        self._examined.setdefault(folder, status)
        return status

    def examined(self, folder: str) -> MailboxStatus | None:
        """The status of this session's first EXAMINE of ``folder``: a poll's view of the
        folder's counters from before it read anything there (``folder_seen``)."""
        return self._examined.get(folder)

    def folder_statuses(self) -> dict[str, FolderStatus] | None:
        """Every folder's counters by one LIST-STATUS round trip (``folders``); None
        without it, and once a folder was opened (Dovecot answers STATUS of the selected
        folder from this session's view, which may be stale)."""
        if self._examined:
            return None
        self._idle.done()
        return folder_statuses(self._conn, self._caps, max_folders=self._conn.settings.max_folders)

    def select_inbox(self) -> MailboxStatus:
        self._selected = self._examine()
        self._selected_since_idle = True
        return self._selected

    def fetch_since(
        self, cursor: MailboxCursor | None, *, backfill_since: date, limit: int
    ) -> FetchBatch:
        return self._fetch(cursor, backfill_since, limit, watch=False)

    def fetch_after_idle(
        self, cursor: MailboxCursor | None, *, backfill_since: date, limit: int
    ) -> FetchBatch:
        return self._fetch(cursor, backfill_since, limit, watch=True)

    def _fetch(
        self, cursor: MailboxCursor | None, backfill_since: date, limit: int, *, watch: bool
    ) -> FetchBatch:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        reused, after_idle = self._pass, False
        if reused is None and watch and self._selected is not None:
            # IDLE said mail came after that EXAMINE: its UIDNEXT is stale. The first
            # page takes the new mail in one pipelined exchange; later pages search on.
            reused, after_idle = dataclasses.replace(self._selected, uidnext=None), True
        self._pass = None
        if reused is not None and (cursor is None or cursor.uidvalidity != reused.uidvalidity):
            reused, after_idle = None, False
        if not after_idle:
            self._idle.done()
        status = reused or self.select_inbox()
        pushed = self._idle.fetch_after if after_idle else None
        batch = self._pager.page(status, cursor, backfill_since, limit, after_idle=pushed)
        if reused is not None and not watch and not batch.messages and not batch.has_more:
            status = self.select_inbox()
            batch = self._pager.page(status, cursor, backfill_since, limit)
        if batch.has_more:
            self._pass = status
        self._idle.last_uid = None if batch.has_more else batch.new_cursor.last_uid
        return batch

    def read_flags(
        self, cursor: FlagCursor | None, window: FlagWindow, folder: str = "INBOX"
    ) -> FlagRead:
        """INBOX's flags (``flags.read_flags``). With CONDSTORE the status of this
        session's last EXAMINE is reused when no IDLE came since (a poll's arrivals just
        took one), so an unchanged INBOX costs no command here at all: changes after that
        EXAMINE have higher MODSEQs than the cursor it leaves, and the next poll reads
        them. The window counts by sequence number, so it always EXAMINEs afresh. Another
        folder is EXAMINEd afresh (INBOX's remembered status is dropped)."""
        self._idle.done()
        self._pass = None
        if folder != "INBOX":
            self._selected = None
            self._idle.last_uid = None
            return read_flags(self._conn, self._caps, self._examine(folder), cursor, window)
        status = self._selected
        reusable = (
            status is not None
            and self._selected_since_idle
            and status.highestmodseq is not None
            and "CONDSTORE" in self._caps
            and not (cursor is not None and cursor.unreliable)
        )
        if status is None or not reusable:
            status = self.select_inbox()
        return read_flags(self._conn, self._caps, status, cursor, window)

    def fetch_folder(
        self, folder: str, cursor: MailboxCursor | None, *, backfill_since: date, limit: int
    ) -> FetchBatch:
        """A page of ``folder`` other than INBOX, after its own cursor: the folder is
        EXAMINEd afresh for every page (a folder pass never reuses INBOX's status), and
        INBOX's remembered status is dropped, since the session left INBOX."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._idle.done()
        self._pass = self._selected = None
        self._idle.last_uid = None
        status = self._examine(folder)
        return self._pager.page(status, cursor, backfill_since, limit)

    def folder_uids(self, folder: str) -> FolderUids:
        """``folder``'s UIDs now (EXAMINE, then ``UID SEARCH ALL``), believed only when
        their count is EXISTS and each is below UIDNEXT. INBOX still selected since its
        last EXAMINE (no IDLE, no other folder since) is not EXAMINEd again: mail that
        came or went since makes the count differ, and the answer is not believed."""
        self._idle.done()
        self._pass = None
        status = self._selected if folder == "INBOX" and self._selected_since_idle else None
        if status is None:
            self._selected = None
            self._idle.last_uid = None
            status = self._examine(folder)
            if folder == "INBOX":
                self._selected, self._selected_since_idle = status, True
        uids = self._pager.all_uids()
        believed = len(uids) == status.exists and (
            status.uidnext is None or all(u < status.uidnext for u in uids)
        )
        return FolderUids(status.uidvalidity, frozenset(uids) if believed else None, status.uidnext)

    def resync(self, folder: str, uidvalidity: int, modseq: int) -> Resynced | None:
        """``EXAMINE folder (QRESYNC (uidvalidity modseq))`` (``qresync``): the folder's
        status, the UIDs expunged and the flags changed since ``modseq``, in one exchange;
        None unless QRESYNC was enabled at login. The folder stays selected."""
        if not self._qresync:
            return None
        self._idle.done()
        self._pass = self._selected = None
        self._idle.last_uid = None
        answer = resync(self._conn, folder, uidvalidity, modseq)
        self._examined.setdefault(folder, answer.status)
        if folder == "INBOX":
            self._selected, self._selected_since_idle = answer.status, True
        return answer

    def folder_labels(self, folder: str) -> FolderLabels | None:
        """Gmail: ``folder``'s UIDs with their labels (EXAMINE, then ``UID FETCH (UID
        X-GM-LABELS)`` by spans), believed as ``folder_uids``' answer is; None without
        X-GM-EXT-1."""
        if "X-GM-EXT-1" not in self._caps:
            return None
        self._idle.done()
        self._pass = self._selected = None
        self._idle.last_uid = None
        return read_labels(self._conn, self._examine(folder))

    def folder_identities(self, uids: Sequence[int]) -> dict[int, str]:
        """The provider ids of these UIDs of the folder last read (no EXAMINE: the
        membership pass asks right after reading it): ``UID FETCH (EMAILID)``, ``(X-GM-
        MSGID)``, else ``(RFC822.SIZE)`` and the Message-ID and Date header fields for the
        version-1 fingerprint; in groups of ``metadata_group``. A message whose answer is
        out of range is left out."""
        if "OBJECTID" in self._caps:
            items = ["EMAILID"]
        elif "X-GM-EXT-1" in self._caps:
            items = ["X-GM-MSGID"]
        else:
            items = ["RFC822.SIZE", HEADER_FIELDS_ITEM]
        found: dict[int, str] = {}
        step = max(1, self._conn.settings.metadata_group)
        ordered = list(uids)
        for start in range(0, len(ordered), step):
            answer = self._pager.uid_fetch(ordered[start : start + step], items)
            for uid, item in answer.items():
                if refusal(item) is None:
                    size = item.get(b"RFC822.SIZE")
                    found[uid] = provider_message_id(item, size if type(size) is int else 0)
        return found

    def list_folders(self) -> FolderListing:
        """The account's folders by one LIST, two with OBJECTID (``folders``); the selected
        mailbox stays."""
        self._idle.done()
        return list_folders(self._conn, self._caps, max_folders=self._conn.settings.max_folders)

    def find_in_sent(self, message_id_header: str) -> bool | None:
        """Whether the Sent folder holds this Message-ID (None: no Sent folder)."""
        self._idle.done()
        self._pass = self._selected = None
        self._idle.last_uid = None
        return sent.find_in_sent(self._conn, self._caps, message_id_header)

    def append_to_sent(self, message: bytes) -> bool:
        """Append a copy to the Sent folder (False: there is none)."""
        self._idle.done()
        return sent.append_to_sent(self._conn, self._caps, message)

    def folder_exists(self, folder: str) -> bool:
        """``STATUS folder (UIDVALIDITY)`` (``exists``): whether the server still has a
        folder its listing left out; the selected mailbox stays."""
        self._idle.done()
        return folder_exists(self._conn, folder)

    def fetch_deferred(
        self, uids: Sequence[int], *, uidvalidity: int, folder: str = "INBOX"
    ) -> DeferredFetch:
        self._idle.done()
        self._pass = None
        if folder == "INBOX":
            status = self.select_inbox()
        else:  # another folder: INBOX's remembered status is dropped, as by fetch_folder
            self._selected = None
            self._idle.last_uid = None
            status = self._examine(folder)
        return self._pager.deferred_bodies(status, uids, uidvalidity)

    def _uid_fetch(self, uids: list[int] | str, items: list[str]) -> FetchData:
        """The paging side's ``UID FETCH`` (compared with imapclient's by a test)."""
        return self._pager.uid_fetch(uids, items)
