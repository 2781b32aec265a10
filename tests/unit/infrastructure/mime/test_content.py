"""The streaming content reader: what a host shows of a message (text, sanitized HTML,
the attachment index) and an attachment's bytes, from hostile input too."""

from __future__ import annotations

import io
import time

import pytest

from infrastructure.mime.content import MAX_DEPTH, MAX_PARTS, StreamingContentReader
from infrastructure.mime.parts import make_attachment_id, safe_filename, sanitize_html
from tests.support import content_corpus as corpus

READER = StreamingContentReader()


def _bytes(raw: bytes, attachment_id: str, message_id: str = "m1") -> bytes:
    return b"".join(READER.chunks(io.BytesIO(raw), attachment_id, message_id=message_id))


def test_a_rich_message_gives_text_html_and_every_attachment() -> None:
    raw = corpus.rich_message()
    content = READER.read(io.BytesIO(raw), message_id="m1")
    assert content.text == "Grüße, plain text\nsecond line"
    assert content.html is not None and "Hello <b>there</b>" in content.html
    views = [a.view() for a in content.attachments]
    assert [(v["filename"], v["contentType"], v["size"], v["inline"]) for v in views] == [
        ("attachment.png", "image/png", len(corpus.PNG), True),
        ("résumé final.pdf", "application/pdf", len(corpus.PDF), False),  # RFC 2231
        ("über notes.txt", "text/plain", 17, False),  # RFC 2047
    ]
    assert views[0]["contentId"] == "logo@corpus.example"
    png, pdf, notes = content.attachments
    assert _bytes(raw, png.attachment_id) == corpus.PNG
    assert _bytes(raw, pdf.attachment_id) == corpus.PDF
    assert _bytes(raw, notes.attachment_id) == b"notes in a file\r\n"


def test_html_loses_scripts_handlers_and_remote_resources_but_keeps_cid_images() -> None:
    html = sanitize_html(corpus.HOSTILE_HTML)
    lowered = html.lower()
    for gone in ("<script", "alert", "onload", "onclick", "<style", "url(", "track.example"):
        assert gone not in lowered, gone
    for gone in ("javascript:", "<iframe", "<form", "<input", "srcset", "steal"):
        assert gone not in lowered, gone
    assert 'src="cid:logo@corpus.example"' in html
    assert 'href="https://ok.example/"' in html and "noopener" in html


def test_the_html_of_a_message_is_the_sanitized_one() -> None:
    content = READER.read(io.BytesIO(corpus.rich_message()), message_id="m1")
    assert content.html == sanitize_html(corpus.HOSTILE_HTML)


def test_filenames_lose_paths_controls_and_nul() -> None:
    content = READER.read(io.BytesIO(corpus.hostile_names_message()), message_id="m1")
    names = [a.filename for a in content.attachments]
    assert names == ["passwd", "windows.ini", "attachment.octet-stream"]
    for name in names:
        assert "/" not in name and "\\" not in name and "\x00" not in name and ".." not in name
    assert safe_filename("a" * 5000 + ".txt", "x") == "a" * 196 + ".txt"
    assert safe_filename("...", "fallback") == "fallback"
    assert safe_filename("C:\\Users\\me\\evil.exe", "x") == "evil.exe"


def test_an_attachment_id_names_nothing_in_another_message() -> None:
    raw = corpus.rich_message()
    content = READER.read(io.BytesIO(raw), message_id="m1")
    pdf = content.attachments[1]
    assert _bytes(raw, pdf.attachment_id, message_id="m2") == b""
    assert _bytes(raw, make_attachment_id("m2", "2"), message_id="m1") == b""
    assert _bytes(raw, "2", message_id="m1") == b""
    assert _bytes(raw, "2-" + "0" * 16, message_id="m1") == b""
    assert _bytes(raw, "\x00/../" * 1000, message_id="m1") == b""


def test_bad_base64_gives_what_decodes_and_never_raises() -> None:
    content = READER.read(io.BytesIO(corpus.bad_base64_message()), message_id="m1")
    assert content.text == "text is fine"
    [bad] = content.attachments
    assert bad.filename == "bad.bin"
    assert len(_bytes(corpus.bad_base64_message(), bad.attachment_id)) == bad.size


def test_huge_part_counts_and_deep_nesting_are_cut_off_quickly() -> None:
    started = time.monotonic()
    many = READER.read(io.BytesIO(corpus.many_parts_message(20_000)), message_id="m")
    deep = READER.read(io.BytesIO(corpus.deep_message(5_000)), message_id="m")
    assert time.monotonic() - started < 10
    assert len(many.attachments) < MAX_PARTS and "TooManyParts" in many.defects
    assert "TooDeep" in deep.defects and deep.text is None
    within = READER.read(io.BytesIO(corpus.deep_message(MAX_DEPTH - 2)), message_id="m")
    assert within.text == "at the bottom"


def test_a_huge_line_and_a_huge_header_stay_bounded() -> None:
    raw = (
        b"Subject: x\r\nX-Long: "
        + b"a" * 3_000_000
        + b"\r\nContent-Type: text/plain\r\n\r\n"
        + b"b" * 5_000_000
        + b"\r\n"
    )
    content = READER.read(io.BytesIO(raw), message_id="m")
    assert "HeadersTooLong" in content.defects
    assert content.truncated and content.text is not None
    assert len(content.text) <= 2 * 1024 * 1024


def test_binary_garbage_gives_no_error() -> None:
    for raw in (bytes(range(256)) * 64, b"", b"\r\n\r\n", b"--\r\n--\r\n" * 100):
        READER.read(io.BytesIO(raw), message_id="m")


@pytest.mark.parametrize(
    ("name", "saved"),
    [
        ("invoice\u202egpj.exe", "invoicegpj.exe"),  # right-to-left override
        ("a\u0085b\u009bc.txt", "abc.txt"),  # C1 controls
        ("line\u2028break\u2029.txt", "linebreak.txt"),  # line and paragraph separators
        ("zero\u200bwidth\u200d\ufeff.pdf", "zerowidth.pdf"),  # zero-width, BOM
        ("CON", "_CON"),
        ("nul.txt", "_nul.txt"),
        ("COM1.tar.gz", "_COM1.tar.gz"),
        ("lpt9", "_lpt9"),
        ("console.txt", "console.txt"),
        ("a" * 500 + ".docx", "a" * 195 + ".docx"),
        ("\u202e\u200b", "fallback"),
    ],
)
def test_hostile_filenames_lose_invisible_characters_and_device_names(
    name: str, saved: str
) -> None:
    assert safe_filename(name, "fallback") == saved
