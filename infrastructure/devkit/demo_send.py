"""The demo's sending step: a private Postfix (submission with SASL from the demo's
Dovecot, delivery into it by LMTP), a reply sent with ``send-message`` from the demo
account to a second one, arriving in its INBOX, and the sender's thread holding the reply
once (the Sent copy, recognized by its Message-ID).

Postfix is Debian's package unpacked into a cache, never installed (``devkit.postfix``):
without apt's package lists or the network the step says so and is skipped."""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.markup import escape
from rich.table import Table

from infrastructure.bootstrap_workers import build_syncer, start_outbox
from infrastructure.cli.runtime import CliError
from infrastructure.devkit.dovecot import DovecotServer
from infrastructure.devkit.postfix import DOMAIN, PostfixError, PostfixServer, dovecot_config
from infrastructure.devkit.processes import free_port
from infrastructure.runtime.settings import Settings

COLLEAGUE = "support"
REPLIED_TO = "Quarterly numbers"


class SendDemo:
    """Owns the private Postfix and the outbox thread of the demo's worker."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.unavailable = ""
        self.postfix: PostfixServer | None = None
        self._lmtp = 0
        self._stop = threading.Event()
        self._outbox: tuple[threading.Thread, threading.Event] | None = None

    def dovecot_config(self) -> str:
        """Dovecot's LMTP and SASL lines, or nothing when Postfix cannot be had."""
        try:
            self._lmtp = free_port()
            return dovecot_config(self._lmtp)
        except (PostfixError, OSError) as error:
            self.unavailable = str(error).strip().splitlines()[0][:200]
            return ""

    def start(self, dovecot: DovecotServer, password: str) -> None:
        if self.unavailable:
            return
        dovecot.add_user(COLLEAGUE, password)
        try:
            self.postfix = PostfixServer(dovecot, self._lmtp).start()
        except (PostfixError, OSError) as error:
            self.unavailable = str(error).strip().splitlines()[0][:200]
            return
        self.settings = self.settings.model_copy(update={"smtp_ca_file": self.postfix.ca_file})

    def smtp(self, username: str) -> dict[str, Any]:
        """The ``smtp`` block of the demo account (empty when Postfix is not there)."""
        if self.postfix is None:
            return {}
        return {
            "smtp": {
                "host": self.postfix.host,
                "port": self.postfix.submission_port,
                "security": "starttls",
                "username": username,
            }
        }

    def close(self) -> None:
        self._stop.set()
        if self._outbox is not None:
            thread, wake = self._outbox
            wake.set()
            thread.join(timeout=10)
        if self.postfix is not None:
            self.postfix.stop()

    def reply(self, demo: Any, account_id: str, dovecot: DovecotServer, password: str) -> None:
        demo.step(
            "Reply from the app (send-message)",
            "The outbox is in the event store: send-message queues the reply (an "
            "idempotency key makes a retried request send once), the worker's outbox "
            "thread submits it to a private Postfix, which delivers it into the other "
            "demo account's INBOX; the copy in Sent comes back as the sender's message.",
        )
        if self.postfix is None:
            demo.console.print(
                "[yellow]Skipped:[/] no private Postfix "
                f"({escape(self.unavailable or 'not started')}). The demo unpacks Debian's "
                "postfix package with `apt-get download postfix`, which needs apt's "
                "package lists (apt-get update) and the network."
            )
            return
        self._outbox = start_outbox(demo.app, self.settings, "demo-worker", self._stop, 1.0)
        colleague = demo.write(
            "connect-mail-account",
            {
                "provider": "imap",
                "displayName": "Support",
                "address": f"{COLLEAGUE}@{DOMAIN}",
                "scope": "shared",
                "authMethod": "password",
                "imap": {
                    "host": dovecot.host,
                    "port": dovecot.port,
                    "security": "none",
                    "username": COLLEAGUE,
                },
                "secret": password,
            },
        )["accountId"]
        items = demo.query("list-messages", {"accountId": account_id, "limit": 500})["items"]
        original = next(i for i in items if i["subject"].startswith(REPLIED_TO))
        started = time.monotonic()
        queued = demo.write(
            "send-message",
            {
                "accountId": account_id,
                "to": [f"{COLLEAGUE}@{DOMAIN}"],
                "subject": f"Re: {original['subject']}",
                "text": "Thanks, the numbers look right. Support, can you follow up?",
                "inReplyTo": original["messageId"],
                "idempotencyKey": "demo-reply-1",
            },
        )
        record = self._until_sent(demo, queued["outboundId"])
        demo.console.print(
            f"outbound {queued['outboundId']}: {record['state']} in "
            f"{(time.monotonic() - started) * 1000:.0f} ms after send-message (the server's "
            f"reply: {escape(record['lastReply'][:60])}); copy in Sent: {record['sentCopy']}"
        )
        arrived = self._arrived(demo, colleague)
        demo.console.print(
            f"arrived in {COLLEAGUE}@{DOMAIN}'s INBOX: [bold]{escape(arrived['subject'])}[/] "
            f"from {escape(arrived['from'][0]['address'])} ({arrived['direction']})"
        )
        self._thread(demo, account_id, original)

    def _until_sent(self, demo: Any, outbound_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while True:
            record: dict[str, Any] = demo.query("get-outbound", {"outboundId": outbound_id})
            if record["state"] in ("sent", "failed", "uncertain", "canceled"):
                break
            if time.monotonic() > deadline:
                raise CliError(f"the reply was not sent: {record['state']}")
            time.sleep(0.05)
        if record["state"] != "sent":
            raise CliError(f"the reply was not sent: {record['state']} {record.get('lastReply')}")
        return record

    def _arrived(self, demo: Any, account_id: str) -> dict[str, Any]:
        syncer = build_syncer(demo.app, self.settings)
        deadline = time.monotonic() + 30
        while True:
            syncer.sync(account_id)
            items = demo.query("list-messages", {"accountId": account_id, "limit": 10})["items"]
            if items:
                return dict(items[0])
            if time.monotonic() > deadline:
                raise CliError("the reply did not arrive in the other account")
            time.sleep(0.2)

    def _thread(self, demo: Any, account_id: str, original: dict[str, Any]) -> None:
        build_syncer(demo.app, self.settings).sync(account_id)  # reads the Sent copy back
        items = demo.query("list-messages", {"accountId": account_id, "limit": 500})["items"]
        thread = [i for i in items if i["threadKey"] == original["threadKey"]]
        table = Table("received", "direction", "subject")
        for item in sorted(thread, key=lambda i: str(i["receivedAt"])):
            table.add_row(item["receivedAt"], item["direction"], escape(item["subject"]))
        demo.console.print(table)
        outbound = [i for i in thread if i["direction"] == "outbound"]
        demo.console.print(
            f"{len(outbound)} outbound message in the sender's thread "
            "(the Sent copy, recognized by its Message-ID)"
        )
