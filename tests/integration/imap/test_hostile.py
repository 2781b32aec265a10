"""The IMAP adapter against a hostile server (``tests.support.hostile_imap``): deadlines
cut drips off, announced literals never take memory, and a server's bad values skip
their message (the cursor moves past, the next message comes) instead of raising."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import textwrap
import time
from datetime import date
from pathlib import Path

import pytest

from application.mail.ports import (
    Credentials,
    ImapEndpoint,
    MailboxTimeout,
    MailboxTransientError,
    OpenOptions,
)
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.imap import ImapAdapterSettings, ImapMailboxSession, ImapMailProvider
from tests.e2e.process import ROOT
from tests.support.hostile_imap import BIG, HostileImapServer, HostileMessage, Script

SINCE = date(2020, 1, 1)
MiB = 1024 * 1024


def open_session(
    server: HostileImapServer,
    tmp_path: Path,
    *,
    deadline: float | None = None,
    **settings: float,
) -> ImapMailboxSession:
    provider = ImapMailProvider(
        blob_store=FilesystemBlobStore(tmp_path / "blobs"),
        settings=ImapAdapterSettings(**settings),  # type: ignore[arg-type]
    )
    endpoint = ImapEndpoint(server.host, server.port, "none", "user")
    return provider.open(
        endpoint, Credentials("password", "pw"), OpenOptions("acct-h", deadline=deadline)
    )


def test_a_greeting_dripped_one_byte_a_second_is_cut_at_the_deadline(tmp_path: Path) -> None:
    script = Script([HostileMessage(1)], drip_from="greeting", drip_seconds=0.5)
    with HostileImapServer(script, lifetime=30) as server:
        started = time.monotonic()
        with pytest.raises(MailboxTimeout):
            # Each byte comes well within the read timeout: only a total deadline helps.
            open_session(server, tmp_path, operation_timeout=2.0, read_timeout=10.0)
        assert time.monotonic() - started < 4.0


def test_a_fetch_dripped_one_byte_a_second_is_cut_at_the_deadline(tmp_path: Path) -> None:
    script = Script([HostileMessage(1)], drip_from="fetch", drip_seconds=1.0)
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path, operation_timeout=2.0)
        started = time.monotonic()
        with pytest.raises(MailboxTimeout):
            session.fetch_since(None, backfill_since=SINCE, limit=10)
        assert time.monotonic() - started < 4.0
        session.close()


def test_the_sessions_deadline_caps_every_operation(tmp_path: Path) -> None:
    script = Script([HostileMessage(1)], drip_from="login", drip_seconds=0.5)
    with HostileImapServer(script, lifetime=30) as server:
        started = time.monotonic()
        with pytest.raises(MailboxTimeout):
            open_session(server, tmp_path, deadline=started + 2.0, operation_timeout=60.0)
        assert time.monotonic() - started < 4.0


def test_a_body_literal_over_the_cap_is_refused_unread_and_recorded_too_large(
    tmp_path: Path,
) -> None:
    # RFC822.SIZE says small (so it is fetched inline) but the literal is 8 MiB.
    liar = HostileMessage(1, body_literal=8 * MiB)
    script = Script([liar, HostileMessage(2)])
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path, stream_threshold_bytes=MiB, chunk_bytes=MiB)
        batch = session.fetch_since(None, backfill_since=SINCE, limit=10)
        session.close()
    states = {m.uid: m.state for m in batch.messages}
    assert states == {1: "too_large", 2: "inline"}
    assert batch.messages[0].ref.size == len(liar.body)  # its metadata is kept
    assert batch.new_cursor.last_uid == 2


def test_a_header_literal_over_the_cap_is_refused_and_recorded_too_large(
    tmp_path: Path,
) -> None:
    script = Script([HostileMessage(1, header_literal=4 * MiB), HostileMessage(2)])
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path, stream_threshold_bytes=MiB, chunk_bytes=MiB)
        batch = session.fetch_since(None, backfill_since=SINCE, limit=10)
        session.close()
    assert {m.uid: m.state for m in batch.messages} == {1: "too_large", 2: "inline"}


def test_an_announced_literal_that_never_comes_ends_at_the_deadline(tmp_path: Path) -> None:
    script = Script([HostileMessage(1, body_literal=BIG, literal_sent=3 * MiB)])
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path, operation_timeout=2.0)
        started = time.monotonic()
        with pytest.raises(MailboxTimeout):
            session.fetch_since(None, backfill_since=SINCE, limit=10)
        assert time.monotonic() - started < 4.0
        session.close()


CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    from datetime import date
    from pathlib import Path
    from application.mail.ports import Credentials, ImapEndpoint, MailProviderError, OpenOptions
    from infrastructure.blobs.filesystem import FilesystemBlobStore
    from infrastructure.imap import ImapAdapterSettings, ImapMailProvider

    port, blobs = int(sys.argv[1]), Path(sys.argv[2])
    provider = ImapMailProvider(
        blob_store=FilesystemBlobStore(blobs),
        settings=ImapAdapterSettings(operation_timeout=20.0),
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    session = provider.open(
        ImapEndpoint("127.0.0.1", port, "none", "user"),
        Credentials("password", "pw"),
        OpenOptions("acct-m"),
    )
    states = {}
    try:
        batch = session.fetch_since(None, backfill_since=date(2020, 1, 1), limit=10)
        states = {m.uid: m.state for m in batch.messages}
    except MailProviderError as error:
        states = {"error": type(error).__name__}
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"before_kib": before, "after_kib": after, "states": states}))
    """
)


def test_a_literal_of_a_gigabyte_does_not_raise_memory(tmp_path: Path) -> None:
    # The server announces ~1 GB and sends all of it: the client reads and discards it.
    script = Script([HostileMessage(1, body_literal=BIG), HostileMessage(2)])
    with HostileImapServer(script, lifetime=60) as server:
        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(server.port), str(tmp_path / "blobs")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    assert report["states"] == {"1": "too_large", "2": "inline"}
    assert report["after_kib"] - report["before_kib"] < 32 * 1024  # KiB: under 32 MiB grown


@pytest.mark.parametrize(
    ("hostile", "reason"),
    [
        (HostileMessage(1, size=str(2**63)), "size_out_of_range"),
        (HostileMessage(1, size=str(2**53 + 1)), "size_out_of_range"),
        (HostileMessage(1, size="-5"), "size_not_a_number"),
        (
            HostileMessage(1, internaldate='"01-Jan-9999 00:00:00 -2359"'),
            "internaldate_offset_impossible",
        ),
        (
            HostileMessage(1, internaldate='"01-Jan-9999 00:00:00 +0000"'),
            "internaldate_out_of_range",
        ),
        (
            HostileMessage(1, internaldate='"01-Jan-1969 00:00:00 +0000"'),
            "internaldate_out_of_range",
        ),
        (HostileMessage(1, garbage=b"* 1 FETCH (UID 1 RFC822.SIZE 12 ((( x"), "fetch_unparseable"),
        # Unreadable dates: imapclient reads them as no date; the message comes without one.
        (HostileMessage(1, internaldate='"31-Feb-2026 00:00:00 +0000"'), None),
        (HostileMessage(1, internaldate='"not a date"'), None),
    ],
)
def test_a_hostile_value_skips_its_message_and_the_next_one_comes(
    tmp_path: Path, hostile: HostileMessage, reason: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    good = HostileMessage(2)
    with HostileImapServer(Script([hostile, good]), lifetime=30) as server:
        session = open_session(server, tmp_path)
        batch = session.fetch_since(None, backfill_since=SINCE, limit=10)
        session.close()
    by_uid = {m.uid: m for m in batch.messages}
    assert by_uid[2].raw == good.body
    assert batch.new_cursor.last_uid == 2
    if reason is None:  # what could be read of it, never the hostile value itself
        assert by_uid[1].raw == hostile.body and by_uid[1].ref.internal_date is None
    else:
        assert 1 not in by_uid
        assert f"imap.skipped account_id=acct-h uid=1 reason={reason}" in caplog.text


def test_uids_out_of_range_in_a_search_answer_are_dropped(tmp_path: Path) -> None:
    script = Script([HostileMessage(1)], uidnext="2", extra_search_uids=(2**32, 2**64))
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path)
        batch = session.fetch_since(None, backfill_since=SINCE, limit=10)
        session.close()
    assert [m.uid for m in batch.messages] == [1]
    assert batch.new_cursor.last_uid == 1


@pytest.mark.parametrize("uidvalidity", ["0", str(2**32), str(2**63 + 1)])
def test_a_uidvalidity_out_of_range_fails_the_session(tmp_path: Path, uidvalidity: str) -> None:
    with HostileImapServer(Script([HostileMessage(1)], uidvalidity=uidvalidity)) as server:
        session = open_session(server, tmp_path)
        with pytest.raises(MailboxTransientError, match="UIDVALIDITY"):
            session.fetch_since(None, backfill_since=SINCE, limit=10)
        session.close()


def test_garbage_lines_fail_the_session_and_nothing_else(tmp_path: Path) -> None:
    script = Script([HostileMessage(1)], garbage_lines=(b"\x00\xffnot imap at all",))
    with HostileImapServer(script, lifetime=30) as server:
        session = open_session(server, tmp_path)
        with pytest.raises(MailboxTransientError):
            session.fetch_since(None, backfill_since=SINCE, limit=10)
        session.close()


def test_a_tls_handshake_that_never_completes_ends_at_the_deadline(tmp_path: Path) -> None:
    # One byte, then silence: the handshake waits for the rest of a TLS record.
    script = Script([HostileMessage(1)], drip_from="greeting", drip_seconds=5.0)
    with HostileImapServer(script, lifetime=30) as server:
        provider = ImapMailProvider(
            blob_store=FilesystemBlobStore(tmp_path / "blobs"),
            settings=ImapAdapterSettings(operation_timeout=2.0, read_timeout=10.0),
        )
        endpoint = ImapEndpoint(server.host, server.port, "tls", "user")
        started = time.monotonic()
        with pytest.raises(MailboxTimeout):
            provider.open(endpoint, Credentials("password", "pw"), OpenOptions("acct-t"))
        assert time.monotonic() - started < 4.0


def test_a_tls_session_completes_its_handshake_under_the_deadline(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    client_side = ssl.create_default_context(cafile=str(cert))
    message = HostileMessage(1)
    with HostileImapServer(Script([message]), lifetime=30, tls=server_side) as server:
        provider = ImapMailProvider(
            blob_store=FilesystemBlobStore(tmp_path / "blobs"),
            settings=ImapAdapterSettings(operation_timeout=5.0, ssl_context=client_side),
        )
        endpoint = ImapEndpoint(server.host, server.port, "tls", "user")
        with provider.open(endpoint, Credentials("password", "pw"), OpenOptions("acct-t")) as s:
            batch = s.fetch_since(None, backfill_since=SINCE, limit=10)
    assert [m.raw for m in batch.messages] == [message.body]
