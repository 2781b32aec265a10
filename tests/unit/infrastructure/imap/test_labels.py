"""Gmail's X-GM-LABELS lines read (``parse_label_lines``) as imaplib hands them over:
quoted, atoms and literals, modified UTF-7, and what a hostile server may send."""

from __future__ import annotations

from infrastructure.imap.labels import parse_label_lines


def test_labels_in_every_form_are_read_and_decoded() -> None:
    data = [
        b'1 (UID 5 X-GM-LABELS (\\Inbox "Work" Clients &Jjo-))',
        b"2 (X-GM-LABELS () UID 6)",
        (b'3 (UID 7 X-GM-LABELS ("a" {9}', b"from a li"),
        b"))",
    ]
    assert parse_label_lines(data) == {
        5: ("\\Inbox", "Work", "Clients", "\u263a"),
        6: (),
        7: ("a", "from a li"),
    }


def test_labels_that_do_not_decode_are_left_out() -> None:
    data = [b'1 (UID 5 X-GM-LABELS ("ctl\x01" "&bad" NIL "ok"))']
    assert parse_label_lines(data) == {5: ("ok",)}


def test_an_unreadable_line_with_a_uid_reads_as_labels_unknown() -> None:
    many = b" ".join(b"L%d" % i for i in range(600))  # past the tokenizer's bound
    data = [
        b"1 (UID 5 X-GM-LABELS (" + many + b"))",
        b"2 (UID 6 X-GM-LABELS ((nested)))",
        b"3 (FLAGS (\\Seen))",  # no UID: not counted at all
        b"4 (UID 99999999999 X-GM-LABELS ())",  # out of range
    ]
    assert parse_label_lines(data) == {5: None, 6: None}
