"""The UID spans of a flag read (``infrastructure.imap.flags``)."""

from __future__ import annotations

from infrastructure.imap.flags import uid_spans


def test_uid_fetches_go_in_spans_the_last_one_open_ended() -> None:
    assert uid_spans(None, 50_000) == ["1:*"]
    assert uid_spans(10, 50_000) == ["1:*"]
    assert uid_spans(50_001, 50_000) == ["1:*"]
    assert uid_spans(50_002, 50_000) == ["1:50000", "50001:*"]
    assert uid_spans(120_000, 50_000) == ["1:50000", "50001:100000", "100001:*"]
