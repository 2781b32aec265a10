"""One account's due messages one after another, with the store's writes overlapped with
the SMTP exchange (``AccountSeries``, run by ``OutboundDelivery.run_series``).

Each message is claimed under the rules of a single attempt, and a message's ``sent`` is
recorded in one write with the ``sending`` of the next (n+1, read after n's transaction,
its attempt opened in memory, not recorded). The lane makes that write itself (a
``Recording``) once n+1's MAIL, RCPT, DATA and its bytes went out, while the server reads
them; the end of its data (the lone dot) follows the write: the server cannot take a
message without it, so ``sending`` is still durable before the server can accept, and
the crash outcomes are those of the writes done one after the other. When the write
finds n+1 taken meanwhile (another worker's claim), the end is withheld and the
connection closed: that worker sends it. No other thread takes part: handing the write
and the read to an I/O thread, and their answers back, were about a fifth of the lanes'
CPU, more than the overlap saved once lanes share the cores with the servers.

The series reads the account's due messages a page at a time from the read model, and
the page's streams with the account's in one statement; a claim prepared from that read
meets the store's version check like any other, and after a conflict (another worker at
the same queue) the rest are read one by one. A message whose Sent copy this worker
appends is recorded before the next starts (the copy needs its ``sent``). A series ends
after a transient failure (the server's trouble is every next message's) and after
``SERIES_LIMIT`` attempts (other accounts' turn); the account's next series pages on
from where it left the queue (``Places``).

*Lanes.* Once the account has a second message waiting, the series runs as many lanes
as its provider allows SMTP sessions (``OutboundDelivery.lanes``): each lane is the loop
above over a connection of its own, so one lane's store write overlaps another's round
trips and concurrent writes share a group commit. The lanes share one picker: a message
goes to one lane (another worker's lanes are kept off by the store's version check, as
ever), the attempts count for all, and a transient failure or an error stops every lane
taking more. A lane's claims and crash outcomes are those of a single series.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING
from uuid import UUID

from application.errors import ConcurrencyConflict
from application.mail.outbound.ports import DuePlace
from application.mail.outbound.sent_copy import Kept
from application.streams import commit, replay
from domain.events import DomainEvent
from domain.mail_account import MailAccount
from domain.outbound import Outbound

if TYPE_CHECKING:
    from application.mail.outbound.delivery import OutboundDelivery

log = logging.getLogger("tidings.outbound")
SERIES_LIMIT = 100  # attempts on one account's messages before others get the thread
SERIES_LOOKS = 1000  # candidates one series looks at (a stale read model offers sent ones)
READ_PAGE = 16  # the account's due messages read at a time
PAGE_FRESH = 1.0  # seconds a page's streams, read together, stand for the store's
PLACE_KEPT = 5.0  # seconds the next series of an account starts where the last one was


@dataclass
class Claim:
    """A message with its attempt opened (``sending``, committed or about to be)."""

    outbound: Outbound
    account: MailAccount


@dataclass(frozen=True)
class Loaded:
    """A message's events and its account, read with the rest of its page."""

    events: list[DomainEvent]
    account: MailAccount


class Places:
    """Where each account's last series left its queue: the next one (a series ends
    after ``SERIES_LIMIT`` attempts and starts again) pages on from there, not from the
    queue's start, where a lagging read model still offers every message it sent.
    Only what it passed is skipped; a message that becomes due behind the place is the
    scan's, as within one series."""

    def __init__(self, most: int = 1024) -> None:
        self._places: dict[str, tuple[DuePlace, float]] = {}
        self._most = most
        self._lock = threading.Lock()

    def get(self, account_id: str) -> DuePlace | None:
        with self._lock:
            place, at = self._places.pop(account_id, (None, 0.0))
        return place if time.monotonic() - at <= PLACE_KEPT else None

    def keep(self, account_id: str, place: DuePlace | None) -> None:
        if place is None:
            return
        with self._lock:
            if len(self._places) >= self._most:
                self._places.clear()
            self._places[account_id] = (place, time.monotonic())


class AccountSeries:
    def __init__(
        self,
        delivery: OutboundDelivery,
        account_id: str,
        take: Callable[[], str | None],
        limit: int,
        stopping: Callable[[], bool],
    ) -> None:
        self._delivery = delivery
        self._picker = _Picker(delivery, account_id, take, limit, stopping)
        self._lanes: list[threading.Thread] | None = None  # the extra ones, once widened
        self._lanes_lock = threading.Lock()

    def run(self) -> int:
        """The number of attempts made, by every lane."""
        try:
            self._lane(first=True)
        except BaseException:
            self._picker.end()  # the other lanes take nothing more
            raise
        finally:
            with self._lanes_lock:
                lanes, self._lanes = self._lanes or [], []  # none started after this
            for lane in lanes:
                lane.join()
            self._delivery.places.keep(self._picker.account_id, self._picker.passed)
        return self._picker.attempts

    def _widen(self, account: MailAccount) -> None:
        """The account has more than one message to send: the other lanes its provider
        allows start (once), each over a connection of its own."""
        with self._lanes_lock:
            if self._lanes is not None:
                return
            self._lanes = []
            for n in range(1, self._delivery.lanes(account)):
                lane = threading.Thread(
                    target=self._extra_lane, name=f"outbound-lane-{n}", daemon=True
                )
                self._lanes.append(lane)
                lane.start()

    def _extra_lane(self) -> None:
        try:
            self._lane(first=False)
        except Exception as error:  # the database gone, say: the scan takes the rest
            self._picker.end()
            log.warning(
                "outbound.lane_failed account_id=%s error=%s",
                self._picker.account_id,
                type(error).__name__,
            )

    def _lane(self, *, first: bool) -> None:
        """Messages one after another over one connection until none is left."""
        delivery, picker = self._delivery, self._picker
        claim: Claim | None = None
        recording: Recording | None = None  # the write of ``claim``'s ``sending``
        while True:
            if claim is None:
                claim, recording = self._next(opened=True), None
                if claim is None:
                    return
            saves = delivery.provider_saves(claim.account)
            try:
                outcome = delivery.submit(claim, _confirm(recording))
            finally:
                if recording is not None:
                    recording.settle()  # written, even where the end never asked for it
            if outcome == "retrying":
                picker.end()  # the server's trouble is every lane's next message's
                return
            picker.count_attempt()
            following = self._next(with_copy=not saves)
            if first and following is not None:
                self._widen(claim.account)
            if not isinstance(outcome, Kept):
                claim, recording = self._opened(following), None
                continue
            if saves and following is not None:  # recorded while the next one goes out
                recording = Recording(self._record_sent, claim.outbound, following)
                claim = following
                continue
            sent = claim
            recorded, claim = self._record_sent(sent.outbound, following)
            recording = None
            if recorded and not saves:
                delivery.save_copy(sent, outcome)

    def _record_sent(self, sent: Outbound, following: Claim | None) -> tuple[bool, Claim | None]:
        recorded, claimed = self._delivery.record_sent(sent, following)
        if following is not None and claimed is None:
            self._picker.forget()  # another worker is at the account's queue too
        return recorded, claimed

    def _opened(self, claim: Claim | None) -> Claim | None:
        """A claim read ahead, recorded now (the previous message was not sent)."""
        if claim is None:
            return None
        try:
            commit(self._delivery.ctx.store, claim.outbound)
        except ConcurrencyConflict:
            self._picker.forget()
            return None
        return claim

    def _next(self, *, opened: bool = False, with_copy: bool = False) -> Claim | None:
        """The series' next message with its attempt opened: committed (``opened``) or
        left for the caller's write. Lapsed, canceled or postponed ones are dealt with
        on the way, as ``run`` would."""
        delivery, picker = self._delivery, self._picker
        while (outbound_id := picker.next()) is not None:
            extra = delivery.settings.imap_timeout if with_copy else 0.0
            step = delivery.prepare(
                outbound_id,
                account_id=picker.account_id,
                extra_lease=extra,
                quiet=not opened,
                loaded=picker.loaded(outbound_id),
            )
            if not isinstance(step, Claim):
                continue
            if not opened:
                return step
            try:
                commit(delivery.ctx.store, step.outbound)
            except ConcurrencyConflict:
                picker.forget()
                continue
            return step
        return None


class Recording:
    """The write of a message's ``sent`` with the next message's claim, made by the lane
    itself once that message's bytes went out, before its end of data (``result``), or
    after its transaction where nothing asked for it (``settle``)."""

    def __init__(
        self,
        write: Callable[[Outbound, Claim], tuple[bool, Claim | None]],
        sent: Outbound,
        following: Claim,
    ) -> None:
        self._write = write
        self._sent = sent
        self._following = following
        self._outcome: tuple[bool, Claim | None] | None = None
        self._error: BaseException | None = None
        self._done = False

    def result(self) -> tuple[bool, Claim | None]:
        """Written once (the lane's thread alone calls it): whether ``sent`` was
        recorded, and the next claim where it was too; raises what the write raised."""
        if not self._done:
            self._done = True
            try:
                self._outcome = self._write(self._sent, self._following)
            except BaseException as error:
                self._error = error
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome

    def settle(self) -> None:
        """Written, if the transaction ended before asking (what the write raised was
        the transaction's to raise)."""
        with contextlib.suppress(BaseException):
            self.result()


def _confirm(recording: Recording | None) -> Callable[[], bool] | None:
    """Whether the claim's write went through (the end of data waits for it)."""
    if recording is None:
        return None

    def confirm() -> bool:
        _recorded, after = recording.result()
        return after is not None

    return confirm


class _Picker:
    """A series' candidates: what the worker hands over (``take``), then the account's
    due messages in the read model; each at most once, to one lane, at most ``limit``
    attempts in all (the lanes share it, under its lock). A read-model page's streams
    are read together (``loaded``), from the account's last place (``Places``)."""

    def __init__(
        self,
        delivery: OutboundDelivery,
        account_id: str,
        take: Callable[[], str | None],
        limit: int,
        stopping: Callable[[], bool],
    ) -> None:
        self.account_id = account_id
        self._stopping = stopping
        self._delivery = delivery
        self._take = take
        self._limit = limit
        self._seen: set[str] = set()
        self._read: deque[DuePlace] = deque()
        self._place = delivery.places.get(account_id)  # the last row read of the read model
        self.passed = self._place  # the last row handed to a lane
        self._page: dict[str, tuple[float, Loaded]] = {}  # streams read with their page
        self._lock = threading.Lock()
        self._ended = False
        self.attempts = 0

    def count_attempt(self) -> None:
        with self._lock:
            self.attempts += 1

    def end(self) -> None:
        """No lane takes another message (a transient failure, an error)."""
        with self._lock:
            self._ended = True

    def loaded(self, outbound_id: str) -> Loaded | None:
        """The message's stream as its page read it, while that read is recent and no
        claim met a newer version since (None: the caller reads it itself)."""
        with self._lock:
            read = self._page.pop(outbound_id, None)
        if read is None or time.monotonic() - read[0] > PAGE_FRESH:
            return None
        return read[1]

    def forget(self) -> None:
        """A claim met a version it did not read: what the page read may be out of date
        too (another worker sends from this account), so each is read again alone."""
        with self._lock:
            self._page.clear()

    def next(self) -> str | None:
        """The next candidate; None after ``limit`` attempts or ``SERIES_LOOKS``
        candidates, once ended, or when none is left."""
        with self._lock:
            return self._next()

    def _next(self) -> str | None:
        while self.attempts < self._limit and len(self._seen) < SERIES_LOOKS:
            if self._ended or self._stopping():
                return None
            outbound_id = self._take() or self._from_read_model()
            if outbound_id is None:
                return None
            if outbound_id not in self._seen:
                self._seen.add(outbound_id)
                if not self._delivery.settled(outbound_id):  # a scan of a lagging model
                    return outbound_id
        return None

    def _from_read_model(self) -> str | None:
        outbox = self._delivery.ctx.mail.outbox
        if outbox is None:
            return None
        while not self._read and len(self._seen) < SERIES_LOOKS:
            now = self._delivery.ctx.clock.now().astimezone(UTC).isoformat()
            # Page by place in the queue: rows the read model has not seen change yet
            # (sent by this series, or settled before it) are never read twice. One
            # that becomes due behind the place is the scan's.
            rows = outbox.due_of_account(self.account_id, now, READ_PAGE, self._place)
            if not rows:
                break
            self._place = rows[-1]
            fresh = {r.outbound_id for r in rows if r.outbound_id not in self._seen}
            # Those this worker settled need no load to tell (a lagging read model
            # offers them to every new series of the account).
            settled = {r for r in fresh if self._delivery.settled(r)}
            self._seen.update(settled)
            unsettled = [r for r in rows if r.outbound_id in fresh and r.outbound_id not in settled]
            self._read.extend(unsettled)
            self._read_page([r.outbound_id for r in unsettled])
        if not self._read:
            return None
        self.passed = self._read.popleft()
        return self.passed.outbound_id

    def _read_page(self, outbound_ids: list[str]) -> None:
        """The page's streams and the account's in one statement: the series' reads of
        its messages one by one were a statement each for the database to plan and run,
        on the cores the SMTP servers share."""
        if not outbound_ids:
            return
        account = UUID(self.account_id)
        streams = self._delivery.ctx.store.load_many([*map(UUID, outbound_ids), account])
        loaded_account = replay(MailAccount, account, streams[account])
        read_at = time.monotonic()
        for i in outbound_ids:
            self._page[i] = (read_at, Loaded(streams[UUID(i)], loaded_account))
