"""Composing an outbound message: Bcc only in the Sent copy, our Message-ID names the
outbound record, no header can be added through a value."""

from __future__ import annotations

import base64
import email
from email import policy

import pytest

from application.mail.outbound.compose import (
    Attachment,
    Draft,
    compose,
    draft_from_json,
    new_message_id,
    outbound_id_of,
)

OUTBOUND = "6f2b9a1c-3d4e-5f60-8a7b-9c0d1e2f3a4b"


def draft(**fields: object) -> Draft:
    values: dict[str, object] = {
        "sender": "alice@example.test",
        "to": ("bob@example.test",),
        "bcc": ("carol@example.test",),
        "subject": "Numbers",
        "text": "see attached",
        "attachments": (Attachment("a.csv", "text/csv", base64.b64encode(b"1,2").decode()),),
        "message_id": new_message_id(OUTBOUND, "alice@example.test"),
        "date": "Sat, 05 Dec 2026 12:00:00 +0000",
        "in_reply_to": "<q@example.test>",
        "references": ("<root@example.test>", "<q@example.test>"),
        **fields,
    }
    return Draft(**values)  # type: ignore[arg-type]


def test_bcc_only_in_the_sent_copy() -> None:
    sent = email.message_from_bytes(compose(draft(), with_bcc=False), policy=policy.default)
    kept = email.message_from_bytes(compose(draft(), with_bcc=True), policy=policy.default)
    assert sent["Bcc"] is None
    assert kept["Bcc"] == "carol@example.test"
    assert sent["In-Reply-To"] == "<q@example.test>"
    assert sent["References"] == "<root@example.test> <q@example.test>"
    attachment = next(iter(sent.iter_attachments()))
    assert attachment.get_content() in (b"1,2", "1,2")


def test_our_message_id_names_the_outbound_record() -> None:
    message_id = new_message_id(OUTBOUND, "alice@example.test")
    assert message_id.endswith("@example.test>")
    assert outbound_id_of(message_id) == OUTBOUND
    assert outbound_id_of("<tidings.nothex@example.test>") is None
    assert outbound_id_of("<abc@example.test>") is None


def test_a_line_break_in_a_value_never_becomes_a_header() -> None:
    with pytest.raises(ValueError):
        compose(draft(subject="x\r\nBcc: victim@example.test"), with_bcc=False)


def test_the_kept_draft_round_trips() -> None:
    original = draft()
    again = draft_from_json(
        original.envelope_json(), original.subject, original.content_json(), original.message_id
    )
    assert again == original
