"""The fast FETCH parser against a real Dovecot: the session's own requests (metadata,
bodies, partial chunks) and what comes with them (news of flag changes made elsewhere)
parse as imapclient parses them, and without handing anything to imapclient."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from imapclient import IMAPClient
from imapclient.imapclient import join_message_ids, seq_to_parenstr_upper
from imapclient.response_parser import parse_fetch_response

from bench._mail import big_message, corpus
from infrastructure.imap import ImapAdapterSettings, ImapMailboxSession
from infrastructure.imap.fetch_response import fallback_count, parse_fetch
from tests.integration.imap.conftest import OpenSession
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.messages import make_message

WINDOW = datetime.now(UTC).date() - timedelta(days=30)
ODD = [
    make_message(1, subject="parens ) and { braces }", body="a ) b {12}\r\n) end"),
    make_message(2, subject="Caf\u00e9", body="8-bit \u00e9\u00e8 and a NUL-free tail"),
    make_message(3, message_id='<"quoted\\"id"@x>', pad_to=3000),
]


def raw_fetch(client: IMAPClient, uids: list[int], items: list[str]) -> list[Any]:
    """imaplib's untagged FETCH data for ``UID FETCH``, as ``IMAPClient.fetch`` gets it."""
    imap = client._imap
    tag = imap._command("UID", "FETCH", join_message_ids(uids), seq_to_parenstr_upper(items))
    typ, data = imap._command_complete("FETCH", tag)
    client._checkok("fetch", typ, data)
    return list(imap._untagged_response(typ, data, "FETCH")[1])


def assert_same(data: list[Any]) -> None:
    before = fallback_count()
    for normalise in (False, True):
        expected = parse_fetch_response(data, normalise, True)
        assert parse_fetch(data, normalise_times=normalise) == expected
    assert fallback_count() == before, "the fast path was not taken"


@pytest.fixture
def session(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> Iterator[ImapMailboxSession]:
    dovecot.deliver(user, corpus(60))
    dovecot.deliver(user, ODD, seen=True)
    dovecot.deliver(user, [big_message(40_000)], internal_date=datetime.now(UTC) - timedelta(1))
    dovecot.imap_append(user, [make_message(99)], internal_date=datetime(2024, 3, 1, 12, 30))
    with IMAPClient(dovecot.host, dovecot.port, ssl=False, timeout=30) as other:
        other.login(user.name, user.password)
        other.select_folder("INBOX")
        other.add_flags([1, 2, 3], [b"\\Flagged", b"$Forwarded", b"Junk"])
        other.add_flags([4], [b"\\Answered", b"\\Deleted"])
    # Small chunks, so that the big message is streamed in several partial fetches.
    s = open_session(
        ImapAdapterSettings(
            connect_timeout=5, read_timeout=30, stream_threshold_bytes=10_000, chunk_bytes=16_000
        )
    )
    s.select_inbox()
    yield s


def test_dovecot_responses_parse_alike_on_the_fast_path(session: ImapMailboxSession) -> None:
    client = session._client
    uids = list(client.search(["ALL"]))
    assert len(uids) == 65
    items = [*session._metadata_items, "MODSEQ"]
    assert_same(raw_fetch(client, uids, items))
    assert_same(raw_fetch(client, uids, ["BODY.PEEK[]"]))
    big = uids[-2]
    for start in (0, 16_000, 32_000, 40_000, 90_000):  # the last two: at and past the end
        assert_same(raw_fetch(client, [big], [f"BODY.PEEK[]<{start}.16000>"]))
    assert_same(raw_fetch(client, [*uids[:5], 999_999], ["FLAGS", "RFC822.SIZE"]))


def test_the_session_answers_as_imapclient_did(
    session: ImapMailboxSession, dovecot: DovecotServer, user: DovecotUser
) -> None:
    client = session._client
    uids = list(client.search(["ALL"]))
    for items in (session._metadata_items, ["BODY.PEEK[]"], ["BODY.PEEK[]<100.2000>"]):
        before = fallback_count()
        assert session._uid_fetch(uids, items) == client.fetch(uids, items)
        assert fallback_count() == before
    # Flag changes made elsewhere come as FETCH news with the next command's answer.
    with IMAPClient(dovecot.host, dovecot.port, ssl=False, timeout=30) as other:
        other.login(user.name, user.password)
        other.select_folder("INBOX")
        other.add_flags(uids[10:20], [b"\\Seen"])
    data = raw_fetch(client, uids[:2], ["FLAGS"])
    assert len(data) > 2  # the news came
    assert_same(data)


def test_a_whole_sync_takes_the_fast_path(session: ImapMailboxSession) -> None:
    before = fallback_count()
    batch = session.fetch_since(None, backfill_since=WINDOW, limit=200)
    assert fallback_count() == before
    assert len(batch.messages) == 64  # the appended message is older than the window
    assert sum(m.blob_ref is not None for m in batch.messages) == 1
