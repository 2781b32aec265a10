"""Refs of bodies sealed under a key of their own (``infrastructure.crypto.body_keys``),
and the owner's name as refs spell it.

``body1:<base64url tenant id>:<account id>:<key name>`` is a streamed body, a file of its
own; ``pack3:<base64url tenant id>:<account id>:<key name>:<pack id>:<offset>:<length>``
a member of a pack. The key's name is 32 hex digits, the pack's too.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from application.mail.ports import BlobOwner, BlobStoreError

_KEYED = re.compile(
    r"^(pack3|body1):([A-Za-z0-9_-]*):([A-Za-z0-9-]{1,64}):([0-9a-f]{32})"
    r"(?::([0-9a-f]{32}):([0-9]{1,15}):([0-9]{1,15}))?$"
)


class BlobRefInvalid(BlobStoreError, ValueError):
    pass


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def unb64(text: str) -> str:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise BlobRefInvalid("not a blob ref") from None


class BodyKeys(Protocol):
    """A key per stored body (``infrastructure.crypto.body_keys.BodyKeys``)."""

    def create(self, owners: Sequence[tuple[str, str]]) -> list[tuple[str, bytes] | None]: ...

    def key(self, tenant_id: str, account_id: str, name: str) -> bytes: ...

    def destroy(self, keys: Sequence[tuple[str, str, str]]) -> None: ...


@dataclass(frozen=True)
class KeyedRef:
    """A keyed ref taken apart: whose body, its key's name, and for a pack member
    (``pack`` not None) where in the pack it lies."""

    owner: BlobOwner
    name: str
    pack: str | None
    offset: int
    length: int

    @staticmethod
    def of(ref: str) -> KeyedRef | None:
        match = _KEYED.match(ref)
        if match is None:
            return None
        kind, tenant, account, name, pack, offset, length = match.groups()
        if (kind == "pack3") != (pack is not None):
            return None
        owner = BlobOwner(unb64(tenant), account)
        return KeyedRef(owner, name, pack, int(offset or 0), int(length or 0))


def streamed_ref(owner: BlobOwner, name: str) -> str:
    return f"body1:{b64(owner.tenant_id)}:{owner.account_id}:{name}"


def member_ref(owner: BlobOwner, name: str, pack_id: str, offset: int, length: int) -> str:
    return f"pack3:{b64(owner.tenant_id)}:{owner.account_id}:{name}:{pack_id}:{offset}:{length}"
