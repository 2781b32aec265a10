"""The demo's whole-mailbox step: what a user does in another mail client — a reply
written in Sent, a message read, one archived, one deleted — mirrored by the next poll."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from imapclient import IMAPClient
from rich.table import Table

from infrastructure.bootstrap_workers import build_syncer
from infrastructure.cli.runtime import CliError

REPLIED, READ, ARCHIVED, DELETED = 118, 119, 117, 116


def reply_from_a_mail_client(replied_subject: str) -> bytes:
    """What a mail client stores in Sent after answering demo message ``REPLIED``."""
    parent = f"<demo-{REPLIED}@tidings.example>"
    return (
        "From: Sales <sales@tidings.example>\r\nTo: Grace Hopper <grace@navy.example>\r\n"
        f"Subject: Re: {replied_subject}\r\nDate: {format_datetime(datetime.now(UTC))}\r\n"
        f"Message-ID: <demo-reply@tidings.example>\r\nIn-Reply-To: {parent}\r\n"
        f"References: {parent}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        "Thanks, Friday works for me.\r\n"
    ).encode()


class MailboxDemo:
    """Acts on the demo's Dovecot mailbox as another IMAP client would, then polls once."""

    def __init__(self, mail: Any) -> None:
        self.mail = mail

    def whole_mailbox(self) -> None:
        mail = self.mail
        demo = mail.demo
        assert mail.server is not None
        demo.step(
            "The whole mailbox",
            "Sent, Archive, Drafts, Junk and Trash are synced beside INBOX. In another mail "
            "client we answer a message (the reply lands in Sent), read one, archive one "
            "and delete one; one poll mirrors all of it.",
        )
        before = self._numbered()
        with IMAPClient(mail.server.host, mail.server.port, ssl=False, timeout=30) as client:
            client.login("sales", mail.password)
            client.append(
                "Sent", reply_from_a_mail_client(before[REPLIED]["subject"]), flags=[b"\\Seen"]
            )
            client.select_folder("INBOX")

            def uids(n: int) -> list[int]:
                found = client.search(["HEADER", "Message-ID", f"<demo-{n}@tidings.example>"])
                return [int(u) for u in found]

            client.add_flags(uids(READ), [b"\\Seen"])
            client.move(uids(ARCHIVED), "Archive")
            client.delete_messages(uids(DELETED))
            client.expunge()
        build_syncer(demo.app, mail.settings).sync(mail.account_id)
        demo.app.projections.catch_up()
        after = self._numbered()
        thread = demo.query(
            "list-messages",
            {"accountId": mail.account_id, "threadKey": after[REPLIED]["threadKey"]},
        )["items"]
        table = Table("the thread, newest first", "direction", "from", "folders")
        for item in thread:
            sender = item["from"][0]["address"] if item["from"] else "?"
            table.add_row(item["subject"], item["direction"], sender, ", ".join(item["folders"]))
        demo.console.print(table)
        if {i["direction"] for i in thread} != {"inbound", "outbound"}:
            raise CliError("the reply in Sent did not join its thread")
        table = Table("elsewhere", "subject", "unread", "folders", "state")
        for label, n in (("read", READ), ("archived", ARCHIVED), ("deleted", DELETED)):
            was, now = before[n], after[n]
            table.add_row(
                label,
                now["subject"],
                f"{was['unread']} → {now['unread']}",
                f"{', '.join(was['folders'])} → {', '.join(now['folders'])}",
                f"{was['state']} → {now['state']}",
            )
        demo.console.print(table)
        wanted = (
            after[READ]["unread"] is False,
            after[ARCHIVED]["folders"] == ["Archive"],
            after[DELETED]["state"] == "deleted",
        )
        if not all(wanted):
            raise CliError("the poll did not mirror what the other mail client did")
        kinds = self._feed_types() - {"message.received"}
        demo.console.print("in the feed (and to webhooks): " + ", ".join(sorted(kinds)))

    def _feed_types(self) -> set[str]:
        demo = self.mail.demo
        kinds: set[str] = set()
        after = 0
        while True:
            page = demo.app.query("read-feed", {"after": after, "limit": 1000}, demo.admin).data
            kinds.update(e["type"] for e in page["items"] if e["type"].startswith("message."))
            if not page["items"]:
                return kinds
            after = page["nextAfter"]

    def _numbered(self) -> dict[int, dict[str, Any]]:
        """The seeded (inbound) messages by their number, deleted ones included."""
        demo = self.mail.demo
        payload = {"accountId": self.mail.account_id, "limit": 500, "direction": "inbound"}
        numbered: dict[int, dict[str, Any]] = {}
        for item in demo.query("list-messages", payload)["items"]:
            tail = item["subject"].rpartition("#")[2]
            if tail.isdigit():
                numbered[int(tail)] = item
        return numbered
