"""Session logic against a stand-in for imapclient: the cases a real server rarely shows."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from imapclient.exceptions import IMAPClientError

from application.mail.ports import (
    MailboxCursor,
    MailboxSession,
    MailboxTransientError,
    MailProvider,
)
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.imap import ImapMailProvider
from infrastructure.imap.session import ImapMailboxSession
from infrastructure.imap.settings import ImapAdapterSettings

SINCE = date(2024, 1, 1)
HDR = b"BODY[HEADER.FIELDS (MESSAGE-ID DATE)]"


def raw(n: int, size: int = 0) -> bytes:
    msg = b"Message-ID: <%d@x>\r\nDate: Mon, 1 Jan 2024 00:00:00 +0000\r\n\r\nbody\r\n" % n
    return msg + b"x" * max(0, size - len(msg))


class FakeClient:
    """Just enough of IMAPClient, with IMAP's quirks (``n:*`` past the end matches the last)."""

    def __init__(self, messages: dict[int, bytes], uidnext: int | None = None) -> None:
        self.messages = dict(messages)
        self.uidnext = uidnext
        self.sizes: dict[int, int] = {}  # RFC822.SIZE overrides (servers can be wrong)
        self.expunge_on_fetch: set[int] = set()
        self.expunge_after_chunks: dict[int, int] = {}
        self.fail_next: BaseException | None = None
        self.calls: list[str] = []
        self.normalise_times = False  # as ImapMailProvider sets it
        self._imap = FakeImap(self)

    def _maybe_fail(self, name: str) -> None:
        self.calls.append(name)
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def select_folder(self, folder: str, readonly: bool) -> dict[bytes, Any]:
        self._maybe_fail("select")
        resp: dict[bytes, Any] = {b"UIDVALIDITY": 7, b"EXISTS": len(self.messages)}
        if self.uidnext is not None:
            resp[b"UIDNEXT"] = self.uidnext
        return resp

    def search(self, criteria: list[Any]) -> list[int]:
        self._maybe_fail("search")
        if criteria[0] == "SINCE":
            return sorted(self.messages)
        lo_text, hi_text = criteria[1].split(":")
        top = max(self.messages, default=0)
        lo, hi = int(lo_text), top if hi_text == "*" else int(hi_text)
        lo, hi = min(lo, hi), max(lo, hi)
        return [u for u in sorted(self.messages) if lo <= u <= hi]

    # UID FETCH at imaplib's level, as the session issues it (see ``FakeImap``).

    def fetch_lines(self, uids: list[int], items: list[str]) -> list[Any]:
        """The untagged FETCH data imaplib would collect: one line per message, split
        after each literal's ``{size}`` (the literal travels with its line)."""
        self._maybe_fail("fetch")
        lines: list[Any] = []
        for uid in uids:
            if uid in self.expunge_on_fetch:
                self.messages.pop(uid, None)
            if uid not in self.messages:
                continue
            seq = sorted(self.messages).index(uid) + 1
            values = self._values(uid, items)
            if uid not in self.messages:  # expunged while being read
                continue
            text = b"%d (UID %d" % (seq, uid)
            for key, value in values:
                if isinstance(value, bytes):
                    lines.append((text + b" %s {%d}" % (key, len(value)), value))
                    text = b""
                else:
                    text += b" %s %s" % (key, value.encode())
            lines.append(text + b")")
        return lines

    def _values(self, uid: int, items: list[str]) -> list[tuple[bytes, str | bytes]]:
        """Each item's key and value: ``str`` as sent on the wire, ``bytes`` a literal."""
        body = self.messages[uid]
        out: list[tuple[bytes, str | bytes]] = []
        for name in items:
            partial = re.fullmatch(r"BODY\.PEEK\[\]<(\d+)\.(\d+)>", name)
            if partial:
                left = self.expunge_after_chunks.get(uid)
                if left is not None:
                    if left == 0:
                        self.messages.pop(uid)
                        return []
                    self.expunge_after_chunks[uid] = left - 1
                offset, length = int(partial.group(1)), int(partial.group(2))
                out.append((b"BODY[]<%d>" % offset, body[offset : offset + length]))
            elif name == "BODY.PEEK[]":
                out.append((b"BODY[]", body))
            elif name == "RFC822.SIZE":
                out.append((b"RFC822.SIZE", str(self.sizes.get(uid, len(body)))))
            elif name == "INTERNALDATE":
                out.append((b"INTERNALDATE", '"02-Jan-2024 00:00:00 +0000"'))
            elif name == "FLAGS":
                out.append((b"FLAGS", "()"))
            elif name.startswith("BODY.PEEK[HEADER.FIELDS"):
                out.append((HDR, body.split(b"\r\n\r\n")[0] + b"\r\n\r\n"))
        return out

    def _checkok(self, command: str, typ: str, data: list[Any]) -> None:
        if typ != "OK":
            raise IMAPClientError(f"{command} failed: {data[0]!r}")

    def logout(self) -> None:
        self.calls.append("logout")

    def shutdown(self) -> None:
        self.calls.append("shutdown")


class FakeImap:
    """The imaplib calls ``IMAPClient.fetch`` makes, answered by the ``FakeClient``."""

    def __init__(self, client: FakeClient) -> None:
        self.client = client
        self.untagged: list[Any] = []

    def _command(self, name: str, *args: Any) -> str:
        assert (name, args[0]) == ("UID", "FETCH") and len(args) == 3, (name, args)
        uids = [int(u) for u in args[1].split(b",")]
        items = re.findall(r"BODY\.PEEK\[[^\]]*\](?:<[^>]*>)?|[^ ()]+", args[2])
        self.untagged = self.client.fetch_lines(uids, items)
        return "A001"

    def _command_complete(self, name: str, tag: str) -> tuple[str, list[bytes]]:
        return "OK", [b"FETCH completed"]

    def _untagged_response(self, typ: str, data: list[bytes], name: str) -> tuple[str, list[Any]]:
        lines, self.untagged = self.untagged, []
        return typ, lines or [None]  # imaplib's "no such responses"


def session(client: FakeClient, tmp_path: Path, **settings: Any) -> ImapMailboxSession:
    return ImapMailboxSession(
        client,
        frozenset({"IMAP4REV1"}),
        account_id="acct-1",
        settings=ImapAdapterSettings(**settings),
        blob_store=FilesystemBlobStore(tmp_path / "blobs"),
    )


def test_the_star_quirk_does_not_return_old_messages(tmp_path: Path) -> None:
    client = FakeClient({1: raw(1), 2: raw(2)}, uidnext=None)  # no UIDNEXT: search n:*
    batch = session(client, tmp_path).fetch_since(
        MailboxCursor(7, 2), backfill_since=SINCE, limit=10
    )
    assert batch.messages == () and batch.new_cursor.last_uid == 2
    assert "search" in client.calls


def test_no_search_when_uidnext_says_nothing_is_new(tmp_path: Path) -> None:
    client = FakeClient({1: raw(1), 2: raw(2)}, uidnext=3)
    batch = session(client, tmp_path).fetch_since(
        MailboxCursor(7, 2), backfill_since=SINCE, limit=10
    )
    assert batch.messages == () and client.calls == ["select"]


def test_a_message_expunged_before_fetch_is_skipped_and_passed(tmp_path: Path) -> None:
    client = FakeClient({1: raw(1), 2: raw(2), 3: raw(3)}, uidnext=4)
    client.expunge_on_fetch = {2}
    batch = session(client, tmp_path).fetch_since(None, backfill_since=SINCE, limit=10)
    assert [m.uid for m in batch.messages] == [1, 3]
    assert batch.new_cursor.last_uid == 3


def test_a_message_expunged_mid_stream_stores_nothing(tmp_path: Path) -> None:
    client = FakeClient({1: raw(1, 5000), 2: raw(2)}, uidnext=3)
    client.expunge_after_chunks = {1: 2}
    s = session(client, tmp_path, stream_threshold_bytes=1000, chunk_bytes=1000)
    batch = s.fetch_since(None, backfill_since=SINCE, limit=10)
    assert [m.uid for m in batch.messages] == [2]
    assert batch.new_cursor.last_uid == 2
    assert list((tmp_path / "blobs" / "tmp").iterdir()) == []


def test_streaming_reads_to_the_end_whatever_rfc822_size_says(tmp_path: Path) -> None:
    body = raw(1, 4500)
    client = FakeClient({1: body}, uidnext=2)
    client.sizes[1] = 2000  # understated
    blobs = FilesystemBlobStore(tmp_path / "blobs")
    s = ImapMailboxSession(
        client,
        frozenset(),
        account_id="a",
        settings=ImapAdapterSettings(stream_threshold_bytes=1000, chunk_bytes=1000),
        blob_store=blobs,
    )
    (msg,) = s.fetch_since(None, backfill_since=SINCE, limit=10).messages
    assert msg.blob_ref is not None
    with blobs.open(msg.blob_ref) as f:
        assert f.read() == body


def test_a_transient_error_breaks_the_session(tmp_path: Path) -> None:
    client = FakeClient({1: raw(1)}, uidnext=2)
    s = session(client, tmp_path)
    client.fail_next = TimeoutError("timed out")
    with pytest.raises(MailboxTransientError):
        s.fetch_since(None, backfill_since=SINCE, limit=10)
    calls = len(client.calls)
    with pytest.raises(MailboxTransientError):
        s.select_inbox()
    assert len(client.calls) == calls  # no I/O on a broken connection
    s.close()
    assert client.calls[-1] == "shutdown" and "logout" not in client.calls


def test_close_logs_out_a_healthy_session_once(tmp_path: Path) -> None:
    client = FakeClient({}, uidnext=1)
    with session(client, tmp_path) as s:
        s.verify()
    s.close()
    assert client.calls == ["select", "logout"]


def test_socket_errors_are_translated(tmp_path: Path) -> None:
    client = FakeClient({1: raw(1)}, uidnext=2)
    client.fail_next = ConnectionResetError(104, "reset")
    with pytest.raises(MailboxTransientError) as err:
        session(client, tmp_path).select_inbox()
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_the_adapter_implements_the_ports(tmp_path: Path) -> None:
    provider: MailProvider = ImapMailProvider(blob_store=FilesystemBlobStore(tmp_path))
    mailbox: MailboxSession = session(FakeClient({}), tmp_path)
    assert provider is not None and mailbox.capabilities == frozenset({"IMAP4REV1"})
