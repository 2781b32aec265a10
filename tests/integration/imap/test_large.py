"""Big messages: streamed to the blob store in chunks, or recorded metadata-only."""

from __future__ import annotations

import hashlib
import tracemalloc
from datetime import date, timedelta

from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.imap import ImapAdapterSettings
from infrastructure.mime.reader import parse_message_file
from tests.integration.imap.conftest import OpenSession
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.messages import make_message

MiB = 1024 * 1024
WINDOW = date.today() - timedelta(days=30)


def test_a_40_mb_message_streams_to_the_blob_store_in_bounded_memory(
    dovecot: DovecotServer,
    user: DovecotUser,
    open_session: OpenSession,
    blob_store: FilesystemBlobStore,
) -> None:
    raw = make_message(1, subject="big one", body="first line of a big message", pad_to=40 * MiB)
    digest = hashlib.sha256(raw).hexdigest()
    size = len(raw)
    dovecot.deliver(user, [raw, make_message(2, subject="small")])
    del raw
    settings = ImapAdapterSettings(
        connect_timeout=5, read_timeout=30, stream_threshold_bytes=4 * MiB, chunk_bytes=1 * MiB
    )
    session = open_session(settings)

    tracemalloc.start()
    try:
        batch = session.fetch_since(None, backfill_since=WINDOW, limit=10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    big, small = batch.messages
    assert big.state == "blob" and big.raw is None and big.ref.size == size
    assert big.blob_ref == f"sha256:{digest}"
    assert small.state == "inline"
    assert peak < 8 * MiB, f"peak {peak / MiB:.1f} MiB for a {size / MiB:.0f} MiB message"
    with blob_store.open(big.blob_ref) as f:
        parsed = parse_message_file(f)
    assert parsed.subject == "big one"
    assert parsed.snippet.startswith("first line of a big message")


def test_messages_over_the_cap_are_metadata_only(
    dovecot: DovecotServer,
    user: DovecotUser,
    open_session: OpenSession,
    blob_store: FilesystemBlobStore,
) -> None:
    big = make_message(1, pad_to=3 * MiB)
    dovecot.deliver(user, [make_message(0), big, make_message(2)])
    settings = ImapAdapterSettings(connect_timeout=5, read_timeout=30, max_message_bytes=1 * MiB)
    session = open_session(settings)
    batch = session.fetch_since(None, backfill_since=WINDOW, limit=10)
    assert [m.state for m in batch.messages] == ["inline", "too_large", "inline"]
    too_large = batch.messages[1]
    assert too_large.ref.size == len(big) and too_large.provider_message_id.startswith("fp:")
    assert too_large.raw is None and too_large.blob_ref is None
    assert not (blob_store.root / "sha256").exists()
    assert batch.new_cursor.last_uid == 3


def test_a_page_stops_at_the_inline_byte_budget(
    dovecot: DovecotServer, user: DovecotUser, open_session: OpenSession
) -> None:
    dovecot.deliver(user, [make_message(i, pad_to=300_000) for i in range(6)])
    settings = ImapAdapterSettings(
        connect_timeout=5, read_timeout=30, max_batch_bytes=1 * MiB, fetch_group_bytes=400_000
    )
    session = open_session(settings)
    first = session.fetch_since(None, backfill_since=WINDOW, limit=100)
    assert [m.uid for m in first.messages] == [1, 2, 3] and first.has_more
    second = session.fetch_since(first.new_cursor, backfill_since=WINDOW, limit=100)
    assert [m.uid for m in second.messages] == [4, 5, 6] and not second.has_more
