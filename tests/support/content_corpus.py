"""Messages with content to show: alternatives, nested multiparts, inline images, named
attachments (RFC 2231 and RFC 2047 names), hostile HTML, and damage."""

from __future__ import annotations

import base64

CRLF = b"\r\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
PDF = b"%PDF-1.4\n" + bytes(range(255, -1, -1)) * 40 + b"\n%%EOF\n"

HOSTILE_HTML = (
    "<html><head><style>body{background:url(http://track.example/bg.png)}</style>"
    '<script>alert("head")</script></head>'
    '<body onload="steal()"><p onclick="steal()" style="background:url(http://track.example/p)">'
    "Hello <b>there</b></p><script>alert(1)</script>"
    '<img src="http://track.example/pixel.gif" width="1" height="1">'
    '<img src="cid:logo@corpus.example" alt="logo">'
    '<img srcset="http://track.example/a.png 2x" src="https://track.example/b.png">'
    '<a href="javascript:steal()">bad link</a> <a href="https://ok.example/">good link</a>'
    '<iframe src="https://track.example/frame"></iframe>'
    '<form action="https://track.example/"><input name="x"></form>'
    "</body></html>"
)


def _b64(data: bytes) -> bytes:
    encoded = base64.b64encode(data)
    return CRLF.join(encoded[i : i + 76] for i in range(0, len(encoded), 76))


def headers(subject: str, content_type: str, *extra: str) -> list[bytes]:
    return [
        f"Message-ID: <{subject.replace(' ', '-')}@corpus.example>".encode(),
        b"Date: Mon, 01 Jan 2024 10:00:00 +0000",
        b"From: Corpus <corpus@origin.example>",
        f"Subject: {subject}".encode(),
        b"MIME-Version: 1.0",
        f"Content-Type: {content_type}".encode(),
        *(e.encode() for e in extra),
    ]


def part(content_type: str, body: bytes, *extra: str, encoding: str | None = None) -> bytes:
    lines = [f"Content-Type: {content_type}".encode(), *(e.encode() for e in extra)]
    if encoding == "base64":
        lines.append(b"Content-Transfer-Encoding: base64")
        body = _b64(body)
    elif encoding:
        lines.append(f"Content-Transfer-Encoding: {encoding}".encode())
    return CRLF.join(lines) + CRLF + CRLF + body


def multipart(boundary: str, *parts: bytes) -> bytes:
    sep = b"--" + boundary.encode()
    out = b"".join(sep + CRLF + p + CRLF for p in parts)
    return out + sep + b"--" + CRLF


def message(head: list[bytes], body: bytes) -> bytes:
    return CRLF.join(head) + CRLF + CRLF + body


def rich_message(subject: str = "rich") -> bytes:
    """multipart/mixed [ multipart/related [ multipart/alternative [plain, html], inline
    png (cid) ], pdf (RFC 2231 name), text file (RFC 2047 name) ]."""
    alternative = multipart(
        "alt-b",
        part(
            "text/plain; charset=utf-8",
            "Grüße, plain text\r\nsecond line".encode(),
            encoding="quoted-printable",
        ).replace("Grüße".encode(), b"Gr=C3=BC=C3=9Fe"),
        part("text/html; charset=utf-8", HOSTILE_HTML.encode(), encoding="base64"),
    )
    related = multipart(
        "rel-b",
        part('multipart/alternative; boundary="alt-b"', alternative),
        part(
            "image/png",
            PNG,
            "Content-ID: <logo@corpus.example>",
            "Content-Disposition: inline",
            encoding="base64",
        ),
    )
    mixed = multipart(
        "mix-b",
        part('multipart/related; boundary="rel-b"', related),
        part(
            "application/pdf",
            PDF,
            "Content-Disposition: attachment; filename*=UTF-8''r%C3%A9sum%C3%A9%20final.pdf",
            encoding="base64",
        ),
        part(
            "text/plain; charset=utf-8",
            b"notes in a file\r\n",
            'Content-Disposition: attachment; filename="=?UTF-8?B?w7xiZXIgbm90ZXMudHh0?="',
        ),
    )
    return message(headers(subject, 'multipart/mixed; boundary="mix-b"'), mixed)


def hostile_names_message() -> bytes:
    return message(
        headers("hostile names", 'multipart/mixed; boundary="hn"'),
        multipart(
            "hn",
            part("text/plain", b"see attached"),
            part(
                "application/octet-stream",
                b"one",
                'Content-Disposition: attachment; filename="../../etc/passwd"',
            ),
            part(
                "application/octet-stream",
                b"two",
                "Content-Disposition: attachment; filename*=UTF-8''..%5C..%5Cwin%00dows%0A.ini",
            ),
            part(
                "application/octet-stream",
                b"three",
                'Content-Disposition: attachment; filename="  "',
            ),
        ),
    )


def folded_type_message() -> bytes:
    """An attachment whose Content-Type is folded (CR LF inside the value), with a
    filename of invisible and reserved parts."""
    return message(
        headers("folded type", 'multipart/mixed; boundary="ft"'),
        multipart(
            "ft",
            part("text/plain", b"see attached"),
            part(
                'application/x-evil\r\n\tfoo"',
                b"evil",
                "Content-Disposition: attachment;"
                " filename*=UTF-8''invoice%E2%80%AEfdp.exe%E2%80%8B",
            ),
        ),
    )


def bad_base64_message() -> bytes:
    return message(
        headers("bad base64 parts", 'multipart/mixed; boundary="bb"'),
        multipart(
            "bb",
            part("text/plain", b"text is fine"),
            part(
                "application/octet-stream",
                b"!!!not*base64 at all===\r\nQUJD=RA\r\nQ",
                'Content-Disposition: attachment; filename="bad.bin"',
                "Content-Transfer-Encoding: base64",
            ),
        ),
    )


def many_parts_message(count: int) -> bytes:
    return message(
        headers("many parts", 'multipart/mixed; boundary="mp"'),
        multipart("mp", *(part("application/octet-stream", b"x") for _ in range(count))),
    )


def deep_message(depth: int) -> bytes:
    body = part("text/plain", b"at the bottom")
    for level in range(depth, 0, -1):
        body = part(f'multipart/mixed; boundary="d{level}"', multipart(f"d{level}", body))
    return message(headers("deep", 'multipart/mixed; boundary="d0"'), multipart("d0", body))


def big_attachment_message(size: int, subject: str = "big attachment") -> bytes:
    """A text body and one attachment of ``size`` bytes (base64), its bytes a pattern."""
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    return message(
        headers(subject, 'multipart/mixed; boundary="big"'),
        multipart(
            "big",
            part("text/plain; charset=utf-8", b"the big one is attached"),
            part(
                "application/octet-stream",
                data,
                'Content-Disposition: attachment; filename="big.bin"',
                encoding="base64",
            ),
        ),
    )


def big_attachment_bytes(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]
