"""What an imported event must be before it enters the store.

An import is outside input: the file may come from anywhere. Each event must decode
through the codec (old shapes upcast), its fields must have their class's types, its
values must survive the store's round trip (no NUL, no lone surrogate, integers within
±(2^53 - 1), finite numbers, nesting at most ``MAX_DEPTH``), and every sealed token or
blob ref in it must belong to the event's own tenant (and account): a token copied
from tenant A into an event of tenant B would otherwise read A's data for B.

Token shapes: ``pii<N>:<key id>:<sealed>`` with key ids ``t.<tenant>`` (tenant key) and
``a.<account>@<tenant>`` (account key); blob refs ``acct<N>:`` / ``pack<N>:`` followed
by the base64url tenant and the account id. A token whose key id has another shape
cannot be attributed, so it is refused too.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
import re
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from domain.events import DomainEvent

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 32
_TOKEN = re.compile(r"^pii[0-9]+:(.+):[^:]*$", re.DOTALL)
_BLOB_REF = re.compile(r"^(?:acct|pack|body)[0-9]+:([A-Za-z0-9_-]*):([A-Za-z0-9-]{1,64}):")
_ENVELOPE = frozenset({"originator_id", "originator_version", "timestamp"})


class InvalidEvent(ValueError):
    """Why an event cannot be imported; the message names a field, never its value."""


def _values(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Every scalar in ``value`` with its path; refuses nesting past ``MAX_DEPTH``."""
    if depth > MAX_DEPTH:
        raise InvalidEvent(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        for key, child in value.items():
            yield f"{path}.{key}", key
            yield from _values(child, f"{path}.{key}", depth + 1)
    elif isinstance(value, list | tuple):
        for index, child in enumerate(value):
            yield from _values(child, f"{path}[{index}]", depth + 1)
    else:
        yield path, value


def check_values(state: Mapping[str, Any]) -> None:
    """Every value can be stored and read back exactly, on both backends."""
    for path, value in _values(state, "state"):
        if isinstance(value, str):
            if "\x00" in value:
                raise InvalidEvent(f"{path}: NUL characters are not allowed")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidEvent(f"{path}: not valid Unicode (a lone surrogate)") from None
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if abs(value) > MAX_SAFE_INTEGER:
                raise InvalidEvent(f"{path}: integer outside ±(2^53 - 1)")
        elif isinstance(value, float) and not math.isfinite(value):
            raise InvalidEvent(f"{path}: not a finite number")


class EventTypes:
    """Checks decoded events against their classes' field types (strict: no coercion)."""

    def __init__(self, classes: Mapping[str, type[DomainEvent]]) -> None:
        self._fields: dict[type[DomainEvent], dict[str, TypeAdapter[Any]]] = {}
        for cls in classes.values():
            hints = typing.get_type_hints(cls)
            self._fields[cls] = {
                f.name: TypeAdapter(hints[f.name])
                for f in dataclasses.fields(cls)
                if f.name not in _ENVELOPE
            }

    def check(self, event: DomainEvent) -> None:
        for name, adapter in self._fields[type(event)].items():
            try:
                adapter.validate_python(getattr(event, name), strict=True)
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in (name, *first["loc"]))
                raise InvalidEvent(f"{where}: {first['msg']}") from None


class StreamTenants:
    """A stream belongs to one tenant: every event of a stream in one file names the
    same tenant, and a message's ``account_id`` names an account of its own tenant."""

    def __init__(self) -> None:
        self._tenants: dict[str, str] = {}

    def check(self, event: DomainEvent) -> None:
        tenant = getattr(event, "tenant_id", None)
        if not isinstance(tenant, str):
            return
        stream = str(event.originator_id)
        if self._tenants.setdefault(stream, tenant) != tenant:
            raise InvalidEvent("tenant_id: this stream belongs to another tenant")
        account = getattr(event, "account_id", None)
        if isinstance(account, str) and self._tenants.get(account, tenant) != tenant:
            raise InvalidEvent("account_id: an account of another tenant")


def _tenant_of_ref(encoded: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def check_owner(event: DomainEvent) -> None:
    """Every sealed token and blob ref in the event names its own tenant and account."""
    tenant = getattr(event, "tenant_id", None)
    accounts = {str(event.originator_id)}
    account_field = getattr(event, "account_id", None)
    if isinstance(account_field, str):
        accounts.add(account_field)
    for path, value in _values(event.payload(), "state"):
        if not isinstance(value, str):
            continue
        token = _TOKEN.match(value)
        if token is not None:
            _check_key_id(path, token.group(1), tenant, accounts)
            continue
        ref = _BLOB_REF.match(value)
        if ref is not None and (
            _tenant_of_ref(ref.group(1)) != tenant or ref.group(2) not in accounts
        ):
            raise InvalidEvent(f"{path}: a blob ref of another tenant or account")


def _check_key_id(path: str, key_id: str, tenant: Any, accounts: set[str]) -> None:
    if key_id.startswith("t."):
        if key_id[2:] == tenant:
            return
    elif key_id.startswith("a."):
        account, at, owner = key_id[2:].partition("@")
        if at and owner == tenant and account in accounts:
            return
    elif key_id.startswith("b."):  # a body's own key: b.<name>@<account>@<tenant>
        _, at, rest = key_id[2:].partition("@")
        account, at, owner = rest.partition("@")
        if at and owner == tenant and account in accounts:
            return
    raise InvalidEvent(f"{path}: a sealed token of another tenant or account")
