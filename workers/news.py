"""What other threads tell the supervisor's loop.

The signal subscriber, the watch and poll pools and the directory reader never touch the
loop's state: each hands a frozen value to an ``Inbox`` and wakes the loop, which
drains the inbox on its own thread and dispatches on the value's type.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from application.mail.sync_outcome import SyncOutcome
from application.signals import Signal
from workers.account_info import AccountInfo, SharedActivity
from workers.policies.watch_stops import WhyStopped


@dataclass(frozen=True)
class SignalReceived:
    signal: Signal


@dataclass(frozen=True)
class WatchStopped:
    account_id: str
    reason: WhyStopped
    error: BaseException | None = None
    lived: float = 0.0  # seconds its connection had lived (0: never connected)


@dataclass(frozen=True)
class MailSeen:
    """A watch ingested new mail."""

    account_id: str


@dataclass(frozen=True)
class FoldersChanged:
    """A watch heard of a change beyond new mail in INBOX (NOTIFY): poll the account soon."""

    account_id: str


@dataclass(frozen=True)
class PollDone:
    outcome: SyncOutcome


@dataclass(frozen=True)
class DirectoryFetched:
    """A refresh from the read model; ``None`` when it could not be read. ``activity``:
    the fleet's shared tier state for those accounts, read right after them."""

    accounts: dict[str, AccountInfo] | None
    activity: SharedActivity | None = None


@dataclass(frozen=True)
class AccountLookedUp:
    """An account named by a signal, read from the event store (``None``: not syncable)."""

    account_id: str
    info: AccountInfo | None


@dataclass(frozen=True)
class Wake:
    """Nothing to do but look at the stop flag (sent by a process signal handler)."""


News = (
    SignalReceived
    | WatchStopped
    | MailSeen
    | FoldersChanged
    | PollDone
    | DirectoryFetched
    | AccountLookedUp
    | Wake
)


class Inbox:
    """A queue of news and the event that wakes the loop; ``tell`` from any thread."""

    def __init__(self) -> None:
        self._news: queue.SimpleQueue[News] = queue.SimpleQueue()
        self._wake = threading.Event()

    def tell(self, news: News) -> None:
        self._news.put(news)
        self._wake.set()

    def drain(self) -> Iterator[News]:
        while True:
            try:
                yield self._news.get_nowait()
            except queue.Empty:
                return

    def wait(self, timeout: float) -> None:
        self._wake.wait(timeout=timeout)
        self._wake.clear()
