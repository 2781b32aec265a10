"""Big mail: a 40 MB message goes through the chunked blob path in bounded memory and
comes back byte for byte; a message over ``max_message_mb`` is recorded metadata-only."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import tracemalloc
from pathlib import Path

from application import User
from tests.integration.mail.conftest import MakeMailApp
from tests.integration.mail.helpers import (
    RECENT,
    connect,
    messages,
    raw_mail,
)
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import ok

MiB = 1024 * 1024


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not allowed."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
        return True
    return False


def test_a_40_mb_message_is_ingested_in_bounded_memory_and_returned_intact(
    make_mail_app: MakeMailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    tmp_path: Path,
) -> None:
    mail = make_mail_app(stream_parse_mb=4)
    raw = raw_mail(1, subject="the big one", body="first line of a big message", pad_to=40 * MiB)
    digest, size = hashlib.sha256(raw).hexdigest(), len(raw)
    dovecot.deliver(mailbox, [raw, raw_mail(2, subject="a small one")], internal_date=RECENT)
    del raw
    account_id = connect(mail.app, admin, dovecot, mailbox)
    mail.app.projections.catch_up()

    rss_before = _status_kib("VmRSS")
    measured_rss = _reset_peak_rss()
    tracemalloc.start()
    try:
        outcome = mail.outcome(account_id, mail.poll())
        _, traced_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth = (_status_kib("VmHWM") - rss_before) * 1024

    assert (outcome.ingested, outcome.error_kind) == (2, None)
    assert traced_peak < 12 * MiB, f"traced peak {traced_peak / MiB:.1f} MiB"
    if measured_rss:
        assert rss_growth < 24 * MiB, f"peak RSS grew {rss_growth / MiB:.1f} MiB"

    by_subject = {m["subject"]: m for m in messages(mail.app, admin)}
    big = by_subject["the big one"]
    assert big["state"] == "ok" and big["sizeBytes"] == size
    assert big["bodyRef"].startswith("body1:")  # streamed, sealed under a key of its own
    assert big["snippet"].startswith("first line of a big message")
    got = ok(mail.app.query("get-message", {"messageId": big["messageId"]}, admin))
    assert got["rawEncoding"] == "base64" and got["raw"] is not None
    assert hashlib.sha256(base64.b64decode(got["raw"])).hexdigest() == digest
    del got

    small = ok(
        mail.app.query("get-message", {"messageId": by_subject["a small one"]["messageId"]}, admin)
    )
    assert b"Subject: a small one" in base64.b64decode(small["raw"])
    lean = ok(
        mail.app.query("get-message", {"messageId": big["messageId"], "includeRaw": False}, admin)
    )
    assert lean["raw"] is None


def test_a_message_over_max_message_mb_is_recorded_without_its_body(
    make_mail_app: MakeMailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    tmp_path: Path,
) -> None:
    mail = make_mail_app(max_message_mb=1)
    big = raw_mail(1, subject="too big to fetch", pad_to=3 * MiB)
    dovecot.deliver(
        mailbox,
        [raw_mail(0, subject="before"), big, raw_mail(2, subject="after")],
        internal_date=RECENT,
    )
    account_id = connect(mail.app, admin, dovecot, mailbox)
    outcome = mail.outcome(account_id, mail.poll())
    assert (outcome.ingested, outcome.error_kind) == (3, None)

    listed = messages(mail.app, admin)
    states = sorted((m["state"], m["subject"]) for m in listed)
    assert states == [("ok", "after"), ("ok", "before"), ("too_large", "")]
    [skipped] = [m for m in listed if m["state"] == "too_large"]
    assert skipped["sizeBytes"] == len(big)
    assert skipped["receivedAt"] == RECENT.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert skipped["bodyRef"] is None and skipped["from"] == []
    got = ok(mail.app.query("get-message", {"messageId": skipped["messageId"]}, admin))
    assert got["raw"] is None and got["state"] == "too_large"
    # The body was never fetched: no blob holds it.
    blob = tmp_path / "blobs"
    stored = [p for p in blob.rglob("*") if p.is_file() and p.parent.name != "tmp"]
    assert stored and sum(p.stat().st_size for p in stored) < 2048  # the two small ones
    assert hashlib.sha256(big).hexdigest() not in {p.name for p in stored}
    assert mail.outcome(account_id, mail.poll()).ingested == 0
    assert len(messages(mail.app, admin)) == 3
