"""Message content through the real path (Dovecot → ingestion → sealed blob →
get-message / get-attachment / the CLI): text, sanitized HTML, attachments, hostile
parts, 404 across messages and tenants, and a 30 MB attachment in bounded memory."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from application import User
from tests.e2e.process import ROOT, cli_env, command
from tests.integration.mail.conftest import MailApp, MakeMailApp
from tests.integration.mail.helpers import RECENT, connect, messages
from tests.support import content_corpus as corpus
from tests.support.dovecot import DovecotServer, DovecotUser
from tests.support.results import failed, ok

MiB = 1024 * 1024


def _by_subject(mail: MailApp, user: User) -> dict[str, dict[str, Any]]:
    return {m["subject"]: m for m in messages(mail.app, user)}


def _get(mail: MailApp, user: User, message_id: str) -> dict[str, Any]:
    return ok(mail.app.query("get-message", {"messageId": message_id}, user))


def _attachment(mail: MailApp, user: User, message_id: str, attachment_id: str) -> bytes:
    payload = {"messageId": message_id, "attachmentId": attachment_id}
    got = ok(mail.app.query("get-attachment", payload, user))
    assert got["contentEncoding"] == "base64"
    return base64.b64decode(got["content"])


def test_ingested_mail_shows_text_sanitized_html_and_attachments(
    mail: MailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    dovecot.deliver(
        mailbox,
        [
            corpus.rich_message(),
            corpus.hostile_names_message(),
            corpus.bad_base64_message(),
            corpus.many_parts_message(3000),
            corpus.deep_message(200),
        ],
        internal_date=RECENT,
    )
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    listed = _by_subject(mail, admin)

    rich = _get(mail, admin, listed["rich"]["messageId"])
    assert rich["text"] == "Grüße, plain text\nsecond line"
    html = rich["html"]
    assert "Hello <b>there</b>" in html and 'src="cid:logo@corpus.example"' in html
    for gone in ("<script", "onload", "onclick", "track.example", "javascript:", "url("):
        assert gone not in html.lower()
    names = [(a["filename"], a["contentType"], a["inline"]) for a in rich["attachments"]]
    assert names == [
        ("attachment.png", "image/png", True),
        ("résumé final.pdf", "application/pdf", False),
        ("über notes.txt", "text/plain", False),
    ]
    png, pdf, _ = rich["attachments"]
    assert png["contentId"] == "logo@corpus.example" and png["size"] == len(corpus.PNG)
    assert _attachment(mail, admin, rich["messageId"], pdf["attachmentId"]) == corpus.PDF
    assert _attachment(mail, admin, rich["messageId"], png["attachmentId"]) == corpus.PNG

    hostile = _get(mail, admin, listed["hostile names"]["messageId"])
    assert [a["filename"] for a in hostile["attachments"]] == [
        "passwd",
        "windows.ini",  # path and control characters dropped
        "attachment.octet-stream",
    ]
    bad = _get(mail, admin, listed["bad base64 parts"]["messageId"])
    assert bad["text"] == "text is fine" and len(bad["attachments"]) == 1
    many = _get(mail, admin, listed["many parts"]["messageId"])
    assert 0 < len(many["attachments"]) < 1000
    deep = _get(mail, admin, listed["deep"]["messageId"])
    assert deep["text"] is None and deep["attachments"] == []

    # An attachment id of another message, or one made up, is 404; so is another
    # tenant's message with a right id.
    other = hostile["messageId"]
    for wrong in (pdf["attachmentId"], "2", "../../etc/passwd", "\u2028" * 500):
        payload = {"messageId": other, "attachmentId": wrong}
        failed(mail.app.query("get-attachment", payload, admin), "not_found", 404)
    stranger = User(id="x", tenant_id="t-" + uuid.uuid4().hex[:8], roles=frozenset({"TenantAdmin"}))
    payload = {"messageId": rich["messageId"], "attachmentId": pdf["attachmentId"]}
    failed(mail.app.query("get-attachment", payload, stranger), "not_found", 404)
    failed(
        mail.app.query("get-message", {"messageId": rich["messageId"]}, stranger), "not_found", 404
    )


def test_get_attachment_refuses_an_answer_over_its_limit(
    make_mail_app: MakeMailApp, admin: User, dovecot: DovecotServer, mailbox: DovecotUser
) -> None:
    mail = make_mail_app(attachment_result_mb=0.005)  # 5 KiB
    dovecot.deliver(mailbox, [corpus.rich_message()], internal_date=RECENT)
    account_id = connect(mail.app, admin, dovecot, mailbox)
    mail.poll()
    [listed] = messages(mail.app, admin, accountId=account_id)
    got = _get(mail, admin, listed["messageId"])
    png, pdf, _ = got["attachments"]
    assert pdf["size"] > 0.005 * 1024 * 1024 > png["size"]
    payload = {"messageId": got["messageId"], "attachmentId": pdf["attachmentId"]}
    error = failed(mail.app.query("get-attachment", payload, admin), "attachment_too_large", 422)
    assert error["size"] == pdf["size"]
    assert _attachment(mail, admin, got["messageId"], png["attachmentId"]) == corpus.PNG


def _child(settings: dict[str, Any], user: User, args: list[str], tmp: Path) -> dict[str, int]:
    settings_file, user_file = tmp / "settings.json", tmp / "user.json"
    settings_file.write_text(json.dumps(settings))
    user_file.write_text(
        json.dumps({"id": user.id, "tenantId": user.tenant_id, "roles": sorted(user.roles)})
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.content_rss",
            str(settings_file),
            str(user_file),
            *args,
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_30_mb_attachment_is_read_and_saved_in_bounded_memory(
    make_mail_app: MakeMailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    tmp_path: Path,
    database_url: str,
) -> None:
    size = 30 * MiB
    mail = make_mail_app()
    dovecot.deliver(
        mailbox,
        [corpus.big_attachment_message(size), corpus.rich_message("small")],
        internal_date=RECENT,
    )
    account_id = connect(mail.app, admin, dovecot, mailbox)
    assert mail.outcome(account_id, mail.poll()).error_kind is None
    listed = _by_subject(mail, admin)
    big_id, small_id = listed["big attachment"]["messageId"], listed["small"]["messageId"]
    lean = ok(mail.app.query("get-message", {"messageId": big_id, "includeRaw": False}, admin))
    [attachment] = lean["attachments"]
    assert lean["text"] == "the big one is attached"
    assert (attachment["filename"], attachment["size"]) == ("big.bin", size)

    settings = {
        "database_url": database_url,
        "blob_dir": str(mail.settings.blob_dir),
        "master_key": mail.settings.master_key.get_secret_value(),  # type: ignore[union-attr]
        "project_inline": False,
    }
    small = _child(settings, admin, [small_id, "-", "-"], tmp_path)
    out = tmp_path / "big.bin"
    big = _child(settings, admin, [big_id, attachment["attachmentId"], str(out)], tmp_path)
    assert big["written"] == size == out.stat().st_size
    expected = hashlib.sha256(corpus.big_attachment_bytes(size)).hexdigest()
    assert hashlib.sha256(out.read_bytes()).hexdigest() == expected
    growth = (big["peakKib"] - small["peakKib"]) * 1024
    print(
        f"30 MB attachment: peak RSS {big['peakKib'] / 1024:.1f} MiB, "
        f"{growth / MiB:+.1f} MiB over a small message"
    )
    assert growth < 16 * MiB, f"peak RSS grew {growth / MiB:.1f} MiB for a 30 MB attachment"


def test_the_cli_saves_an_attachment_to_a_file(
    mail: MailApp,
    admin: User,
    dovecot: DovecotServer,
    mailbox: DovecotUser,
    tmp_path: Path,
    database_url: str,
) -> None:
    dovecot.deliver(mailbox, [corpus.rich_message()], internal_date=RECENT)
    account_id = connect(mail.app, admin, dovecot, mailbox)
    mail.poll()
    [listed] = messages(mail.app, admin, accountId=account_id)
    pdf = _get(mail, admin, listed["messageId"])["attachments"][1]
    env = cli_env(
        database_url=database_url,
        blob_dir=str(mail.settings.blob_dir),
        master_key=mail.settings.master_key.get_secret_value(),  # type: ignore[union-attr]
    )
    user = json.dumps({"id": admin.id, "tenantId": admin.tenant_id, "roles": sorted(admin.roles)})
    out = tmp_path / "saved.pdf"
    args = ["mail", "attachment", listed["messageId"], pdf["attachmentId"], "--as", user]
    done = subprocess.run(
        command(*args, "-o", str(out)),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == corpus.PDF and "résumé final.pdf" in done.stdout
    missing = tmp_path / "missing.bin"
    done = subprocess.run(
        command(
            "mail", "attachment", listed["messageId"], "2-0000", "--as", user, "-o", str(missing)
        ),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and "not_found" in done.stderr and not missing.exists()
