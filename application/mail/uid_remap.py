"""The UID map rebuilt for messages stored before it existed (``UidRemap``), a step of
the membership pass for each folder it read and believed.

The map (``mail_flag_uids``) is written as pages are stored, so a message stored before
it came has no row: its flags, moves and deletions go unseen (``unmapped`` in the flag
pass's log). For each folder, once per UIDVALIDITY, the UIDs the map lacks are asked
for their identity, at most ``MAX_PER_FOLDER`` per poll from where the last poll
stopped (``remap_from``), so a large folder is walked over several polls and then
never again:

    the folder's UIDs now (the pass's believed answer) without a row, from ``remap_from``
    -> their provider ids (``IdentityReader.folder_identities``, on the folder the pass
       just read: no EXAMINE): EMAILID or X-GM-MSGID where offered, else the version-1
       fingerprint (Message-ID, Date, size: the header fields, no body)
    -> the message ids of those whose stream exists get a row (flags unknown: the flag
       pass compares with the stream); the others are mail never stored (older than the
       backfill window) or stored under a version-2 fingerprint, which needs the body's
       bytes and is left unmapped rather than downloaded again
    -> ``remap_from`` saved past the last UID asked (past the folder's last UID when
       nothing is left).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from application.context import Context
from application.mail.flag_state import UidEntry
from domain.message import message_id

MAX_PER_FOLDER = 1000


@runtime_checkable
class IdentityReader(Protocol):
    """A session that reads the provider ids of the selected folder's UIDs."""

    def folder_identities(self, uids: Sequence[int]) -> dict[int, str]:
        """UID -> provider id of the folder last read (raises ``MailProviderError``)."""
        ...


@runtime_checkable
class RemapStore(Protocol):
    def remember(self, entries: Sequence[UidEntry]) -> None: ...

    def remap_from(self, account_id: str, folder: str, uidvalidity: int) -> int:
        """The first UID not yet asked about under ``uidvalidity`` (1: none asked)."""
        ...

    def save_remap(self, account_id: str, folder: str, uidvalidity: int, next_uid: int) -> None: ...


class UidRemap:
    def __init__(self, ctx: Context, store: RemapStore) -> None:
        self.ctx = ctx
        self.store = store

    def rows_for(
        self,
        session: object,
        account_id: str,
        folder: str,
        *,
        uidvalidity: int,
        uids: Iterable[int],
        mapped: set[int],
        uidnext: int | None = None,
    ) -> list[UidEntry]:
        """The rows found now for ``folder``'s unmapped UIDs (already remembered)."""
        if not isinstance(session, IdentityReader):
            return []
        start = self.store.remap_from(account_id, folder, uidvalidity)
        present = sorted(uids)
        todo = [u for u in present if u >= start and u not in mapped]
        # A walk that is done goes on from UIDNEXT where known (the folder's last messages
        # may be gone), so a poll can tell it is done without a search (``remap_pending``).
        end = max(present[-1] + 1 if present else 0, uidnext or 0)
        if not todo:
            if end > start:
                self.store.save_remap(account_id, folder, uidvalidity, end)
            return []
        asked = todo[:MAX_PER_FOLDER]
        wanted = set(asked)
        streams = {
            uid: message_id(account_id, provider_id)
            for uid, provider_id in session.folder_identities(asked).items()
            if uid in wanted
        }
        stored = self.ctx.store.existing(set(streams.values()))
        entries = [
            UidEntry(account_id, folder, uidvalidity, uid, stream, None)
            for uid, stream in sorted(streams.items())
            if stream in stored
        ]
        self.store.remember(entries)
        done = asked[-1] + 1 if len(todo) > len(asked) else end
        self.store.save_remap(account_id, folder, uidvalidity, done)
        return entries
