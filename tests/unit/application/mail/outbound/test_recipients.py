"""Recipients as send-message takes them: a bare address or a display name with its
address, strictly parsed; the name encoded when composed, never a way to add a header
or to show another address."""

from __future__ import annotations

import pytest

from application.mail.outbound.compose import Draft, compose
from application.mail.outbound.recipients import MAX_NAME, Mailbox, parse_mailbox


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bob@example.test", Mailbox("bob@example.test")),
        (" bob@example.test ", Mailbox("bob@example.test")),
        ("Bob Smith <bob@example.test>", Mailbox("bob@example.test", "Bob Smith")),
        ("Bob   Smith<bob@example.test>", Mailbox("bob@example.test", "Bob Smith")),
        ('"Smith, Bob" <bob@example.test>', Mailbox("bob@example.test", "Smith, Bob")),
        ('"say \\"hi\\" \\\\o/" <b@example.test>', Mailbox("b@example.test", 'say "hi" \\o/')),
        ("José Müller <j@example.test>", Mailbox("j@example.test", "José Müller")),
        ("<bob@example.test>", Mailbox("bob@example.test")),
    ],
)
def test_accepted(value: str, expected: Mailbox) -> None:
    assert parse_mailbox(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "Bob\r\nBcc: x@example.test <bob@example.test>",
        "bob@example.test\n",
        '"Bob\\\r\n" <bob@example.test>',
        "B" * (MAX_NAME + 1) + " <bob@example.test>",
        "=?utf-8?q?ceo=40bank.example?= <bob@example.test>",
        '"=?utf-8?b?Y2VvQGJhbmsuZXhhbXBsZQ==?=" <bob@example.test>',
        "Smith, Bob <bob@example.test>",
        "Bob <bob@example.test",
        '"Bob <bob@example.test>',
        '"Bob\\" <bob@example.test>',
        'Bob "the" <bob@example.test>',
        "Bob\u202e <bob@example.test>",
        "Bob <bob@example.test> <eve@example.test>",
        "Bob <bob@example.test>, eve@example.test",
        "Bob <bob>",
        "Bob <b(ob@example.test>",
        "x" * 400 + "@example.test",
    ],
)
def test_refused(value: str) -> None:
    with pytest.raises(ValueError):
        parse_mailbox(value)


def test_names_are_quoted_or_encoded_and_the_envelope_keeps_addresses() -> None:
    draft = Draft(
        sender="alice@example.test",
        to=(parse_mailbox("José <j@example.test>"), parse_mailbox('"Smith, Bob" <b@example.test>')),
        bcc=(parse_mailbox("Carol <c@example.test>"),),
        subject="s",
        message_id="<m@example.test>",
        date="Sat, 05 Dec 2026 12:00:00 +0000",
    )
    head = compose(draft, with_bcc=True).split(b"\r\n\r\n", 1)[0]
    assert b'To: =?utf-8?q?Jos=C3=A9?= <j@example.test>, "Smith, Bob" <b@example.test>' in head
    assert b"Bcc: Carol <c@example.test>" in head
    assert draft.recipients == ["j@example.test", "b@example.test", "c@example.test"]
    assert draft.envelope_json()["to"] == ["j@example.test", "b@example.test"]
