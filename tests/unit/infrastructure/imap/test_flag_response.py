"""FETCH answers of flags, read from byte literals as imaplib collects them."""

from __future__ import annotations

from infrastructure.imap.flag_response import parse_flag_lines, window_ranges


def test_uid_flags_and_modseq_in_any_order_and_case() -> None:
    got = parse_flag_lines(
        [
            b"1 (UID 10 FLAGS (\\Seen $Work) MODSEQ (7))",
            b"2 (modseq (9) flags () uid 11)",
            b"3 (FLAGS (\\Recent \\Flagged) UID 12)",
        ]
    )
    assert got.unread == 0
    assert got.entries[10].flags.flags == ("$Work", "\\Seen")
    assert got.entries[10].modseq == 7
    assert got.entries[11].flags.flags == ()
    assert got.entries[11].modseq == 9
    assert got.entries[12].flags.flags == ("\\Flagged",)
    assert got.entries[12].flags.dropped == 1
    assert got.entries[12].modseq is None


def test_lines_not_believed_are_counted_never_guessed() -> None:
    got = parse_flag_lines(
        [
            b"4 (FLAGS (\\Seen))",  # no UID: an unsolicited update by sequence number
            b"5 (UID 0 FLAGS ())",  # UID out of range
            b"6 (UID 4294967296 FLAGS ())",
            b"7 (UID 13 FLAGS (\\Seen) RFC822.SIZE 12)",  # an item not asked for
            b"8 (UID 14 FLAGS ((nested)))",
            (b"9 (UID 15 FLAGS {3}", b"abc"),  # a literal
            b"garbage",
            b"10 (UID 16)",  # no FLAGS
            b"11 (UID 17 FLAGS () MODSEQ (0))",
        ]
    )
    assert got.entries == {}
    assert got.unread == 9
    assert parse_flag_lines([None]).entries == {}


def test_hostile_keywords_are_bounded_by_the_domain() -> None:
    many = b" ".join(b"k%d" % i for i in range(3000))
    huge = b"x" * 2048
    got = parse_flag_lines(
        [b"1 (UID 1 FLAGS (" + many + b"))", b"2 (UID 2 FLAGS (" + huge + b" \xff\xfe \\Seen))"]
    )
    assert len(got.entries[1].flags.flags) == 50
    assert got.entries[1].flags.dropped == 2950
    assert got.entries[2].flags.flags == ("\\Seen",)
    assert got.entries[2].flags.dropped == 2


def test_a_uid_answered_twice_keeps_the_last_answer() -> None:
    got = parse_flag_lines([b"1 (UID 5 FLAGS ())", b"1 (UID 5 FLAGS (\\Seen))"])
    assert got.entries[5].flags.flags == ("\\Seen",)


def test_the_window_takes_the_newest_and_a_rotating_sweep() -> None:
    assert window_ranges(0, 1, 500, 2000) == (None, 1)
    assert window_ranges(300, 1, 500, 2000) == ("1:300", 1)
    assert window_ranges(3000, 1, 500, 2000) == ("1:2000,2501:3000", 2001)
    assert window_ranges(3000, 2001, 500, 2000) == ("2001:2500,2501:3000", 1)
    # A sweep position past the end (messages were expunged) starts over.
    assert window_ranges(1000, 2001, 500, 2000) == ("1:500,501:1000", 1)


def test_every_message_is_revisited_within_ceil_n_over_sweep_polls() -> None:
    exists, newest, sweep = 10_000, 500, 2000
    seen: set[int] = set()
    start = 1
    for _ in range(-(-(exists - newest) // sweep)):
        seqset, start = window_ranges(exists, start, newest, sweep)
        assert seqset is not None
        for part in seqset.split(","):
            low, high = (int(x) for x in part.split(":"))
            seen |= set(range(low, high + 1))
    assert seen == set(range(1, exists + 1))
    assert start == 1
