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
    new_message_id,
    outbound_id_of,
    without_bcc,
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


def test_without_bcc_drops_the_header_and_its_folded_lines_only() -> None:
    kept = compose(draft(bcc=tuple(f"r{n}@example.test" for n in range(30))), with_bcc=True)
    assert b"Bcc:" in kept
    sent = without_bcc(kept)
    parsed = email.message_from_bytes(sent, policy=policy.default)
    assert parsed["Bcc"] is None
    assert b"r29@example.test" not in sent
    assert parsed["Subject"] == "Numbers"
    assert sent.split(b"\r\n\r\n", 1)[1] == kept.split(b"\r\n\r\n", 1)[1]
    folded = b"Subject: x\r\nbcc: a@b,\r\n c@d\r\nTo: e@f\r\n\r\nBcc: in the body"
    assert without_bcc(folded) == b"Subject: x\r\nTo: e@f\r\n\r\nBcc: in the body"
