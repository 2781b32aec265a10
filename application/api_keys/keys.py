"""The shape of an API key and how its secret is kept.

A key reads ``tdk_<key id, 32 hex>_<secret, 43 base64url chars>``. The id names the
key's stream, so authenticating reads one stream; the secret (256 random bits) is kept
as its SHA-256 digest only. A slow password hash would add nothing here: the secret is
random and long, not chosen by a person, so its digest cannot be guessed back.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from uuid import UUID, uuid4

from application.users import SYSTEM_ADMIN, TENANT_ADMIN, User

PREFIX = "tdk_"
_SHAPE = re.compile(r"tdk_([0-9a-f]{32})_([A-Za-z0-9_-]{43})")


@dataclass(frozen=True)
class NewKey:
    key_id: UUID
    secret: str
    text: str  # the whole key, shown once


def new_key() -> NewKey:
    key_id, secret = uuid4(), secrets.token_urlsafe(32)
    return NewKey(key_id, secret, f"{PREFIX}{key_id.hex}_{secret}")


def may_manage(user: User) -> bool:
    """Tenant admins manage their tenant's keys; system admins the system tenant's."""
    return TENANT_ADMIN in user.roles or (user.in_system_tenant and SYSTEM_ADMIN in user.roles)


def parse_key_id(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None


def split(key: str) -> tuple[UUID, str] | None:
    """The key id and secret of a well-formed key; None for anything else."""
    match = _SHAPE.fullmatch(key)
    if match is None:
        return None
    return UUID(hex=match.group(1)), match.group(2)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def matches(secret: str, expected_digest: str) -> bool:
    return hmac.compare_digest(digest(secret), expected_digest)
