"""The ``Tidings-Signature`` header: ``t=UNIX,v1=HEX``, HEX = HMAC-SHA256(secret, "UNIX.BODY").

Hosts verify a delivery with ``verify_signature``: the HMAC is compared in constant
time over the raw body bytes as received, and the timestamp must be within
``tolerance`` seconds of now, so a captured request cannot be replayed later. Several
``v1=`` values may appear (during a secret rotation a receiver may hold two secrets);
one matching value is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "Tidings-Signature"
EVENT_ID_HEADER = "Tidings-Event-Id"
ATTEMPT_HEADER = "Tidings-Delivery-Attempt"
DEFAULT_TOLERANCE = 300.0
_MAX_HEADER = 4096


class SignatureError(ValueError):
    """The header is malformed, the timestamp is outside the tolerance, or no HMAC matches."""


def sign(secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify_signature(
    secret: str,
    header: str,
    body: bytes,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> int:
    """Return the signed timestamp; raise ``SignatureError`` unless the header carries a
    valid HMAC of ``body`` made within ``tolerance`` seconds of ``now``."""
    if len(header) > _MAX_HEADER:
        raise SignatureError("signature header too long")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        # ASCII digits only: ``str.isdigit`` also takes superscripts, which ``int`` refuses.
        if key == "t" and value.isascii() and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        raise SignatureError("no timestamp or no v1 signature in the header")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise SignatureError("timestamp outside the tolerance")
    expected = sign(secret, body, timestamp).rsplit("v1=", 1)[1]
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise SignatureError("no signature matches")
    return timestamp
