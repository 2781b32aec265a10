from pathlib import Path

from application.mail.parsing import Address, MimeParser
from infrastructure.blobs.filesystem import FilesystemBlobStore
from infrastructure.mime.parser import EmailMimeParser

RAW = (
    b"Authentication-Results: mx.example.com; spf=pass;\r\n"
    b" dmarc=fail (p=reject) header.from=x.test\r\n"
    b"Message-ID: <m1@x.test>\r\n"
    b"In-Reply-To: <p1@x.test>\r\n"
    b"From: Mallory <m@x.test>\r\n"
    b"To: a@example.com\r\n"
    b"Date: Tue, 02 Jan 2024 10:30:00 +0000\r\n"
    b"Subject: hi\r\n\r\nbody text\r\n"
)


def test_implements_the_mime_parser_port(tmp_path: Path) -> None:
    blobs = FilesystemBlobStore(tmp_path)
    parser: MimeParser = EmailMimeParser(blobs)
    from_bytes = parser.parse_bytes(RAW)
    assert from_bytes == parser.parse_blob(blobs.put_bytes(RAW))
    assert from_bytes.message_id == "<m1@x.test>" and from_bytes.in_reply_to == "<p1@x.test>"
    assert from_bytes.sender == (Address("Mallory", "m@x.test"),)
    assert from_bytes.snippet == "body text" and not from_bytes.malformed


def test_dmarc_failed_only_for_the_trusted_server(tmp_path: Path) -> None:
    parser = EmailMimeParser(FilesystemBlobStore(tmp_path))
    parsed = parser.parse_bytes(RAW)
    assert parser.dmarc_failed(parsed, "mx.example.com")
    assert not parser.dmarc_failed(parsed, "other.example")
    passing = parser.parse_bytes(RAW.replace(b"dmarc=fail", b"dmarc=pass"))
    assert not parser.dmarc_failed(passing, "mx.example.com")
