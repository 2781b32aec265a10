"""Deferred bodies: messages recorded with their metadata first (state ``deferred``,
past the account's daily download budget), whose bodies are still to be fetched.

The list is operational state shared by the fleet, like the sync cursor: any worker may
hold the account when the budget allows again, so it lives in the read-model database,
not in a process. An entry names where the body is on the server (UIDVALIDITY, UID) and
which message stream it completes.

Lifecycle of an entry:

    held (written after the message's ``MessageIngested`` is stored, before the
          cursor moves past it; held again, with its new place, when the message
          comes again deferred, e.g. after a UIDVALIDITY reset)
    -> dropped when its stream has its second event (``MessageBodyFetched`` or
       ``MessageBodyVanished``), when the stream is not a deferred message (another
       worker stored the message with its body), or with its account (deleted, or its
       tenant shredded).

Entries name their folder: a page of any synced folder may come past the budget, and its
deferred messages' bodies are fetched from that folder, checked against its own cursor.

An entry is never the proof that a message is deferred: the stream is. Whoever completes
one reads the stream first and appends version 2, so racing workers collide and one wins.

Fingerprint twins: a deferred message on a server without OBJECTID is known by its
version-1 fingerprint (Message-ID, Date, size: no bytes to digest yet), while a message
whose body came is stored under version 2 (that plus a digest of its bytes). When a
mailbox is read again (a UIDVALIDITY reset) past the budget, a message stored under
version 2 comes back deferred; ``paired`` recognises it, so it is not recorded twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class DeferredBody:
    account_id: str
    tenant_id: str
    message_id: str
    uidvalidity: int
    uid: int
    size_bytes: int
    folder: str = "INBOX"  # where (UIDVALIDITY, UID) is: INBOX or another synced folder


class DeferredBodies(Protocol):
    def hold(self, entries: Sequence[DeferredBody]) -> None:
        """Add entries, or move existing ones (same message) to their new place."""
        ...

    def due(self, account_id: str, limit: int) -> list[DeferredBody]:
        """The account's entries, oldest place first (UIDVALIDITY, then UID)."""
        ...

    def among(self, message_ids: Iterable[str]) -> dict[str, DeferredBody]:
        """The entries of these messages (any accounts), by message id."""
        ...

    def drop(self, message_ids: Iterable[str]) -> None: ...

    def pair(self, twins: Iterable[tuple[str, str, str]]) -> None:
        """Remember, for messages stored under a version-2 fingerprint id, their version-1
        id: ``(account id, version-1 id, version-2 id)``; the first pair of an id stays."""
        ...

    def paired(self, first_ids: Iterable[str]) -> set[str]:
        """Which of these version-1 ids belong to a message stored under version 2."""
        ...

    def forget_account(self, account_id: str) -> None: ...

    def forget_tenant(self, tenant_id: str) -> None: ...
