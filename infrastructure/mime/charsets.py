"""Text out of bytes in a message's charset: only the standard library's text charsets
decode (``unicode-escape``, ``punycode``, ``idna``, ``rot13`` and the like are codecs, not
charsets: they decode as an unknown charset does), decoding never raises, and the text
never carries a lone surrogate or NUL (an event must hold valid Unicode)."""

from __future__ import annotations

import codecs
import re

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
SURROGATE = re.compile("[\ud800-\udfff]")
# Codecs of the standard library that are not charsets: they turn text into control
# (escape sequences decoding to lone surrogates, IDNA labels) or bytes into bytes.
_NOT_CHARSETS = frozenset(
    {
        "unicode-escape",
        "raw-unicode-escape",
        "punycode",
        "idna",
        "undefined",
        "charmap",
        "base64",
        "bz2",
        "hex",
        "quopri",
        "rot-13",
        "uu",
        "zlib",
    }
)
_LENIENT_CHARSETS = {"unknown-8bit", "x-unknown", "unknown", "8bit", "default", "x-user-defined"}


def decode_text(data: bytes, charset: str, defects: list[str], *, final: bool = True) -> str:
    """Decode text (never raising, no lone surrogates); with ``final=False`` a multi-byte
    sequence cut at the end is dropped."""
    charset = charset.strip().strip('"').lower()[:64]
    if charset in _LENIENT_CHARSETS or charset in ("us-ascii", "ascii"):
        charset = "utf-8"
    codec = _text_codec(charset)
    if codec is None:
        defects.append("UnknownCharset")
        codec = "utf-8"
    try:
        text = codecs.getincrementaldecoder(codec)().decode(data, final=final)
    except UnicodeError:  # UnicodeDecodeError, or a codec's own (UTF-16 without a BOM)
        defects.append("CharsetMismatch")
        fallback = "cp1252" if codec == "utf-8" and _decodes(data, "cp1252") else codec
        try:
            text = data.decode(fallback, "replace")
        except UnicodeError:
            text = data.decode("utf-8", "replace")
    return storable(text, defects)


def _text_codec(charset: str) -> str | None:
    """The standard library's codec for a text charset; None for anything else."""
    try:
        info = codecs.lookup(charset)
    except (LookupError, ValueError, TypeError):
        return None
    decoder = info.incrementaldecoder
    if info.name in _NOT_CHARSETS or decoder is None:
        return None
    if not decoder.__module__.startswith("encodings."):  # a codec someone registered
        return None
    return info.name


def storable(text: str, defects: list[str]) -> str:
    """``text`` with lone surrogates and NUL replaced (an event must hold valid Unicode)."""
    if text.isascii():
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if SURROGATE.search(text):
        defects.append("LoneSurrogate")
        text = SURROGATE.sub("\ufffd", text)
    return text


def _decodes(data: bytes, codec: str) -> bool:
    try:
        data.decode(codec)
    except UnicodeError:
        return False
    return True
