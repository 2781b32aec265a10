"""Whether a folder a listing left out is still on the server (``exists``): which
STATUS answers say gone, which say there, and which decide nothing."""

from __future__ import annotations

import imaplib
from typing import Any

import pytest

from application.mail.ports import MailboxThrottled, MailboxTransientError
from infrastructure.imap.connection import Connection
from infrastructure.imap.exists import folder_exists
from infrastructure.imap.settings import ImapAdapterSettings


class Imap:
    """imaplib's side of one STATUS: the tagged answer given."""

    def __init__(self, typ: str, text: bytes) -> None:
        self.answer = (typ, [text])
        self.untagged_responses: dict[str, list[Any]] = {"STATUS": [b"x (UIDVALIDITY 1)"]}
        self.sent: list[tuple[Any, ...]] = []

    def _command(self, *args: Any) -> bytes:
        self.sent.append(args)
        return b"A1"

    def _command_complete(self, name: str, tag: bytes) -> tuple[str, list[bytes]]:
        if self.answer[0] == "BAD":
            raise imaplib.IMAP4.error("STATUS command error: BAD")
        return self.answer


class Client:
    def __init__(self, typ: str, text: bytes) -> None:
        self._imap = Imap(typ, text)

    def _normalise_folder(self, name: str) -> bytes:
        return b'"' + name.encode() + b'"'


def exists(typ: str, text: bytes) -> bool:
    conn = Connection(Client(typ, text), account_id="a", settings=ImapAdapterSettings())
    return folder_exists(conn, "Sent")


def test_ok_is_there_and_no_that_it_does_not_exist_is_gone() -> None:
    assert exists("OK", b"Completed") is True
    assert exists("NO", b"[NONEXISTENT] Mailbox doesn't exist: Sent") is False  # Dovecot
    assert exists("NO", b"Mailbox does not exist") is False  # Cyrus
    assert exists("NO", b"[NOPERM] Permission denied") is False
    assert exists("NO", b"[TRYCREATE] no such mailbox") is False


def test_any_other_answer_decides_nothing() -> None:
    for typ, text in (
        ("BAD", b"what"),
        ("NO", b"[SERVERBUG] internal error"),
        ("NO", b"[INUSE] in use"),
    ):
        with pytest.raises(MailboxTransientError):
            exists(typ, text)
    for text in (b"too many commands, try again later", b"[UNAVAILABLE] backend down"):
        with pytest.raises(MailboxThrottled):
            exists("NO", text)
