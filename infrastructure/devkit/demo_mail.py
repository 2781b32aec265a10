"""The demo's mail steps: a private Dovecot on loopback, a seeded mailbox, ingestion
with a progress bar, a message's text and attachments, and a new message arriving by
IMAP IDLE with its latency."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from infrastructure.bootstrap_workers import build_supervisor, build_syncer
from infrastructure.cli.runtime import CliError
from infrastructure.devkit.demo_send import SendDemo
from infrastructure.devkit.dovecot import DovecotServer, dovecot_available
from infrastructure.runtime.settings import Settings

SEEDED = 120
SENDERS = [
    ("Ada Lovelace", "ada@analytical.example"),
    ("Grace Hopper", "grace@navy.example"),
    ("Alan Turing", "alan@bletchley.example"),
    ("Edsger Dijkstra", "ewd@eindhoven.example"),
]
SUBJECTS = [
    "Quarterly numbers",
    "Lunch on Friday?",
    "Re: the proposal",
    "Invoice 2026-11",
    "Meeting notes",
    "Your order has shipped",
]


def ensure_dovecot(console: Any) -> None:
    if dovecot_available():
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        console.print("Dovecot is not installed: installing dovecot-imapd (apt-get)…", style="dim")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "dovecot-imapd"],
        ):
            subprocess.run(command, env=env, check=False, capture_output=True)  # noqa: S603 - fixed argv
    if not dovecot_available():
        raise CliError(
            "the mail demo needs Dovecot: install it (apt-get install dovecot-imapd) "
            "and run the demo again"
        )


def message(n: int, when: datetime, subject: str | None = None) -> bytes:
    name, address = SENDERS[n % len(SENDERS)]
    subject = subject or f"{SUBJECTS[n % len(SUBJECTS)]} #{n}"
    refs = f"References: <demo-{n - 1}@tidings.example>\r\n" if n % 3 == 2 else ""
    return (
        f"From: {name} <{address}>\r\nTo: Sales <sales@tidings.example>\r\n"
        f"Subject: {subject}\r\nDate: {format_datetime(when)}\r\n"
        f"Message-ID: <demo-{n}@tidings.example>\r\n{refs}"
        "Content-Type: text/plain; charset=utf-8\r\n\r\n"
        f"Hello, this is message number {n}. Regards, {name.split()[0]}\r\n"
    ).encode()


CONTENT_SUBJECT = "Quarterly report attached"


def content_message(when: datetime) -> bytes:
    """A multipart message: text, HTML with a script and a remote image, one attachment."""
    report = base64.b64encode(b"region,revenue\r\nnorth,120\r\nsouth,95\r\n").decode()
    return (
        "From: Ana Lima <ana@customer.example>\r\nTo: Sales <sales@tidings.example>\r\n"
        f"Subject: {CONTENT_SUBJECT}\r\nDate: {format_datetime(when)}\r\n"
        "Message-ID: <demo-content@tidings.example>\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="m"\r\n\r\n'
        '--m\r\nContent-Type: multipart/alternative; boundary="a"\r\n\r\n'
        "--a\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        "Hi, the quarterly report is attached.\r\n"
        "--a\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
        '<p onclick="track()">Hi, the <b>quarterly report</b> is attached.</p>'
        '<img src="https://tracker.example/pixel.gif"><script>track()</script>\r\n'
        "--a--\r\n"
        "--m\r\nContent-Type: text/csv\r\nContent-Transfer-Encoding: base64\r\n"
        "Content-Disposition: attachment; filename*=UTF-8''q3-r%C3%A9sum%C3%A9.csv\r\n\r\n"
        f"{report}\r\n--m--\r\n"
    ).encode()


class MailDemo:
    """The mail half of the demo: owns the private Dovecot and the in-process worker."""

    def __init__(self, demo: Any, settings: Settings) -> None:
        self.demo = demo
        self.settings = settings
        self.server: DovecotServer | None = None
        self.account_id = ""
        self.password = "demo-" + os.urandom(6).hex()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self.sending = SendDemo(settings)

    def close(self) -> None:
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=10)
        self.sending.close()
        if self.server is not None:
            self.server.stop()

    def start_mailbox(self) -> None:
        demo = self.demo
        demo.step(
            "A private mail server",
            "Dovecot on 127.0.0.1 with one mailbox, seeded with "
            f"{SEEDED} messages (the demo stops it at the end).",
        )
        ensure_dovecot(demo.console)
        self.server = DovecotServer(extra_config=self.sending.dovecot_config()).start()
        user = self.server.add_user("sales", self.password)
        self.sending.start(self.server, self.password)
        now = datetime.now(UTC)
        for n in range(1, SEEDED + 1):
            when = now - timedelta(hours=SEEDED - n)
            self.server.deliver(user, [message(n, when)], internal_date=when)
        demo.console.print(f"Dovecot listening on {self.server.host}:{self.server.port}")

    def connect_and_ingest(self) -> None:
        demo = self.demo
        assert self.server is not None
        demo.step(
            "Connect the mailbox and ingest it",
            "connect-mail-account logs in first (verify); the reconciliation poll then "
            "fetches, parses and records every message exactly once.",
        )
        self.account_id = demo.write(
            "connect-mail-account",
            {
                "provider": "imap",
                "displayName": "Sales",
                "address": "sales@tidings.example",
                "scope": "shared",
                "authMethod": "password",
                "verify": True,
                "imap": {
                    "host": self.server.host,
                    "port": self.server.port,
                    "security": "none",
                    "username": "sales",
                },
                **self.sending.smtp("sales"),
                "secret": self.password,
            },
        )["accountId"]
        syncer = build_syncer(demo.app, self.settings)
        columns = (TextColumn("ingesting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        started = time.monotonic()
        with Progress(*columns, console=demo.console, transient=True) as bar:
            task = bar.add_task("ingest", total=SEEDED)
            outcome = syncer.sync(self.account_id, on_page=lambda n: bar.advance(task, n))
        if outcome.error_kind:
            raise CliError(f"ingest failed: {outcome.error_kind}")
        demo.app.projections.catch_up()
        elapsed = time.monotonic() - started
        demo.console.print(
            f"{outcome.ingested} messages ingested in {elapsed:.2f} s; "
            "a second pass finds nothing new:"
        )
        again = syncer.sync(self.account_id)
        demo.console.print(f"  ingested={again.ingested} duplicates={again.duplicates}")

    def show_inbox(self) -> None:
        demo = self.demo
        demo.step(
            "The inbox, as the app sees it",
            "Addresses, subjects and snippets are encrypted with the tenant's key in the "
            "events and read models; queries decrypt them for allowed callers.",
        )
        data = demo.query("list-messages", {"accountId": self.account_id, "limit": 5})
        table = Table("received", "from", "subject", "state")
        for item in data["items"]:
            sender = item["from"][0]["name"] if item["from"] else "?"
            table.add_row(item["receivedAt"], sender, item["subject"], item["state"])
        demo.console.print(table)
        threads = demo.query("list-threads", {"accountId": self.account_id, "limit": 200})
        demo.console.print(f"{len(threads['items'])} threads (replies grouped by References)")

    def show_content(self) -> None:
        demo = self.demo
        assert self.server is not None
        demo.step(
            "A message's text and attachments",
            "get-message decodes the text, sanitizes the HTML (no scripts, no remote "
            "images) and lists the attachments, from the sealed raw MIME; get-attachment "
            "(or `tidings mail attachment`, or the HTTP download) returns the bytes.",
        )
        self.server.deliver("sales", [content_message(datetime.now(UTC))])
        build_syncer(demo.app, self.settings).sync(self.account_id)
        demo.app.projections.catch_up()
        items = demo.query("list-messages", {"accountId": self.account_id, "limit": 500})["items"]
        [item] = [i for i in items if i["subject"] == CONTENT_SUBJECT]
        got = demo.query("get-message", {"messageId": item["messageId"], "includeRaw": False})
        demo.console.print(f"text: {escape(got['text'].strip())}")
        demo.console.print(f"html (sanitized): {escape(got['html'].strip())}")
        table = Table("attachmentId", "filename", "type", "bytes", "inline")
        for a in got["attachments"]:
            table.add_row(
                a["attachmentId"], a["filename"], a["contentType"], str(a["size"]), str(a["inline"])
            )
        demo.console.print(table)
        first = got["attachments"][0]
        saved = demo.query(
            "get-attachment",
            {"messageId": item["messageId"], "attachmentId": first["attachmentId"]},
        )
        demo.console.print(f"get-attachment {first['filename']}: {saved['size']} bytes (base64)")

    def idle_arrival(self) -> None:
        demo = self.demo
        assert self.server is not None
        demo.step(
            "New mail arrives by IMAP IDLE",
            "A worker (in this process: single-process mode, no Redis) holds the "
            "mailbox's IDLE connection; we append a message and time it until queryable.",
        )
        supervisor = build_supervisor(demo.app, self.settings, "demo-worker")
        self._worker = threading.Thread(target=supervisor.run, args=(self._stop,), daemon=True)
        self._worker.start()
        demo.write("user-active", {})  # the user is here: its mailboxes go hot (IDLE)
        deadline = time.monotonic() + 30
        while not any("sales" in t and "IDLE" in t for t in self.server.process_titles()):
            if time.monotonic() > deadline:
                raise CliError("the worker did not start watching the mailbox")
            time.sleep(0.1)
        demo.console.print(
            "Dovecot shows the session: "
            + escape(", ".join(t for t in self.server.process_titles() if "sales" in t))
        )
        before = len(
            demo.query("list-messages", {"accountId": self.account_id, "limit": 500})["items"]
        )
        started = time.monotonic()
        self.server.imap_append(
            "sales", [message(SEEDED + 1, datetime.now(UTC), subject="Hot off the press")]
        )
        while True:
            items = demo.query("list-messages", {"accountId": self.account_id, "limit": 500})[
                "items"
            ]
            if len(items) > before:
                break
            if time.monotonic() - started > 30:
                raise CliError("the new message did not arrive")
            time.sleep(0.02)
        latency = (time.monotonic() - started) * 1000
        demo.console.print(
            f"[bold]{items[0]['subject']}[/] was queryable {latency:.0f} ms after "
            "APPEND (Dovecot itself waits ~500 ms before it announces new mail)."
        )

    def send_reply(self) -> None:
        assert self.server is not None
        self.sending.reply(self.demo, self.account_id, self.server, self.password)
