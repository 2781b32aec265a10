"""Which domain events become which public feed items, and their public shapes.

The shapes are a contract with integrators (docs/feed.md has their JSON Schemas): they
name things as the API does (camelCase, ``messageId``, ``accountId``) and never carry
internal fields. Personal data stays sealed in the feed's table, as in the events; the
keys listed in ``Entry.sealed`` are revealed when an item is served.
"""

from __future__ import annotations

from collections.abc import Callable
from hashlib import sha1
from typing import Any, NamedTuple
from uuid import NAMESPACE_URL, uuid5

from domain.custom_field_values import (
    CustomFieldValueCleared,
    CustomFieldValueExpired,
    CustomFieldValueSet,
)
from domain.events import DomainEvent
from domain.field_definition import (
    FieldDefinitionDefined,
    FieldDefinitionDeleted,
    FieldDefinitionUpdated,
)
from domain.mail_account import (
    MailAccountAuthFailed,
    MailAccountConnected,
    MailAccountDeleted,
    MailAccountDisconnected,
    MailAccountReauthRequired,
    MailAccountReconnected,
    MailAccountUpdated,
)
from domain.message import (
    MessageBodyFetched,
    MessageBodyVanished,
    MessageDeleted,
    MessageFlagsChanged,
    MessageFoldersChanged,
    MessageIngested,
    MessageRestored,
)
from domain.message_retention import MessageBodyErased, MessageExpired
from domain.outbound import OutboundFailed, OutboundQueued, OutboundSent

_ITEM_NAMESPACE = uuid5(NAMESPACE_URL, "urn:tidings:feed-item")
_NAMESPACE_BYTES = _ITEM_NAMESPACE.bytes
# uuid5's variant: the hex digit's top two bits become 10.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}

TYPES = (
    "message.received",
    "message.body_fetched",
    "message.body_vanished",
    "message.flags_changed",
    "message.body_erased",
    "message.expired",
    "message.moved",
    "message.deleted",
    "message.restored",
    "outbound.queued",
    "outbound.sent",
    "outbound.failed",
    "mail_account.connected",
    "mail_account.updated",
    "mail_account.disconnected",
    "mail_account.reconnected",
    "mail_account.deleted",
    "mail_account.auth_failed",
    "mail_account.reauth_required",
    "custom_field.defined",
    "custom_field.updated",
    "custom_field.deleted",
    "custom_field_value.set",
    "custom_field_value.cleared",
    "custom_field_value.expired",
)


Built = tuple[str, str | None, dict[str, Any], tuple[str, ...]]


class Entry(NamedTuple):
    """What the feed projection stores for one event (a named tuple: a rebuild makes one
    per event, and a frozen dataclass costs several times as much to build)."""

    item_id: str
    tenant_id: str
    type: str
    account_id: str | None  # delivery order is kept per account for mail items
    data: dict[str, Any]
    sealed: tuple[str, ...] = ()  # keys of ``data`` holding sealed tokens


# Sealed keys whose plaintext is JSON (address lists), parsed when revealed.
JSON_KEYS = frozenset({"from", "to", "cc"})


def item_id(event: DomainEvent) -> str:
    """Stable across rebuilds: the event's own identity, not the feed's position.

    It is ``str(uuid5(_ITEM_NAMESPACE, "<originator id>/<version>"))``, computed on the
    SHA-1's hex digits without ``UUID`` objects (a rebuild computes one per event)."""
    name = f"{event.originator_id}/{event.originator_version}".encode()
    h = sha1(_NAMESPACE_BYTES + name, usedforsecurity=False).hexdigest()
    # uuid5 sets the version nibble to 5 and the top two variant bits to 10.
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


def _message(e: MessageIngested) -> Built:
    data = {
        "messageId": str(e.originator_id),
        "accountId": e.account_id,
        "threadKey": e.thread_key,
        "from": e.sender,
        "to": e.to,
        "cc": e.cc,
        "subject": e.subject,
        "snippet": e.snippet,
        "receivedAt": e.received_at,
        "sizeBytes": e.size_bytes,
        "folder": e.folder,
        "folders": [e.folder],
        "direction": "outbound" if e.extra.get("direction") == "outbound" else "inbound",
        "state": e.state,
    }
    return "message.received", e.account_id, data, ("from", "to", "cc", "subject", "snippet")


def _body_fetched(e: MessageBodyFetched) -> Built:
    data = {
        "messageId": str(e.originator_id),
        "accountId": e.account_id,
        "snippet": e.snippet,
        "sizeBytes": e.size_bytes,
        "state": e.state,
    }
    return "message.body_fetched", e.account_id, data, ("snippet",)


def _body_vanished(e: MessageBodyVanished) -> Built:
    data = {
        "messageId": str(e.originator_id),
        "accountId": e.account_id,
        "state": "vanished",
        "reason": e.reason,
    }
    return "message.body_vanished", e.account_id, data, ()


def _flags_changed(e: MessageFlagsChanged) -> Built:
    data = {
        "messageId": str(e.originator_id),
        "accountId": e.account_id,
        "flags": list(e.flags),
        "unread": e.unread,
        "flagged": e.flagged,
    }
    return "message.flags_changed", e.account_id, data, ()


def _retired(e: MessageBodyErased | MessageExpired) -> Built:
    expired = isinstance(e, MessageExpired)
    data = {
        "messageId": str(e.originator_id),
        "accountId": e.account_id,
        "bodyErased": True,
        "keepFor": e.keep_for,
    }
    if expired:
        data["state"] = "deleted"
    return ("message.expired" if expired else "message.body_erased"), e.account_id, data, ()


def _moved(e: MessageFoldersChanged) -> Built:
    data = {
        "messageId": str(e.originator_id),
        "accountId": e.account_id,
        "folders": list(e.folders),
        "added": list(e.added),
        "removed": list(e.removed),
    }
    return "message.moved", e.account_id, data, ()


def _deleted(e: MessageDeleted) -> Built:
    data = {"messageId": str(e.originator_id), "accountId": e.account_id, "reason": e.reason}
    return "message.deleted", e.account_id, data, ()


def _restored(e: MessageRestored) -> Built:
    data = {
        "messageId": str(e.originator_id),
        "accountId": e.account_id,
        "folders": list(e.folders),
        "state": e.state,
    }
    return "message.restored", e.account_id, data, ()


def _outbound(e: OutboundQueued | OutboundSent | OutboundFailed) -> Built:
    data: dict[str, Any] = {"outboundId": str(e.originator_id), "accountId": e.account_id}
    if isinstance(e, OutboundQueued):
        data |= {"state": "queued", "recipients": e.recipients, "sizeBytes": e.size_bytes}
        return "outbound.queued", e.account_id, data, ()
    if isinstance(e, OutboundSent):
        data |= {"state": "sent", "attempt": e.attempt, "reply": e.reply}
        return "outbound.sent", e.account_id, data, ()
    data |= {"state": "failed", "attempt": e.attempt, "reply": e.reply, "errorKind": e.error_kind}
    return "outbound.failed", e.account_id, data, ()


def _account(kind: str) -> Callable[[Any], Built]:
    def build(e: Any) -> Built:
        account_id = str(e.originator_id)
        data: dict[str, Any] = {"accountId": account_id}
        sealed: tuple[str, ...] = ()
        if isinstance(e, MailAccountConnected):
            data |= {
                "provider": e.provider,
                "scope": e.scope,
                "ownerUserId": e.owner_user_id,
                "authMethod": e.auth_method,
                "displayName": e.display_name,
                "address": e.address,
            }
            sealed = ("displayName", "address")
        elif isinstance(e, MailAccountUpdated):
            data["changed"] = sorted(_camel(key) for key in e.changes)
            data["reason"] = e.reason
        elif isinstance(e, MailAccountAuthFailed | MailAccountReauthRequired):
            data["errorKind"] = e.error_kind
        return f"mail_account.{kind}", account_id, data, sealed

    return build


def _definition(kind: str) -> Callable[[Any], Built]:
    def build(e: Any) -> Built:
        data: dict[str, Any] = {"entityName": e.entity_name, "fieldKey": e.field_key}
        if isinstance(e, FieldDefinitionDefined | FieldDefinitionDeleted):
            data["scope"] = e.scope
        if isinstance(e, FieldDefinitionDefined | FieldDefinitionUpdated):
            data |= {
                "field": e.field,
                "required": e.required,
                "searchable": e.searchable,
                "displayOrder": e.display_order,
                "label": e.label,
            }
            if e.retention is not None:  # {keepFor, action}; absent: kept for ever
                data["retention"] = e.retention
        return f"custom_field.{kind}", None, data, ()

    return build


def _value(kind: str) -> Callable[[Any], Built]:
    def build(e: Any) -> Built:
        data: dict[str, Any] = {
            "entityName": e.entity_name,
            "entityId": e.entity_id,
            "fieldKey": e.field_key,
        }
        sealed: tuple[str, ...] = ()
        if isinstance(e, CustomFieldValueSet):
            data["value"] = {"s": e.sealed, "d": e.digest}  # a read-model cell, opened when served
            sealed = ("value",)
        elif isinstance(e, CustomFieldValueExpired):
            # What the value became: its anonymous form (sealed), or null (removed).
            data["action"] = e.action
            data["value"] = None if e.sealed is None else {"s": e.sealed, "d": e.digest}
            sealed = () if e.sealed is None else ("value",)
        return f"custom_field_value.{kind}", None, data, sealed

    return build


_BUILDERS: dict[type[DomainEvent], Callable[[Any], Built]] = {
    MessageIngested: _message,
    MessageBodyFetched: _body_fetched,
    MessageBodyVanished: _body_vanished,
    MessageFlagsChanged: _flags_changed,
    MessageBodyErased: _retired,
    MessageExpired: _retired,
    MessageFoldersChanged: _moved,
    MessageDeleted: _deleted,
    MessageRestored: _restored,
    OutboundQueued: _outbound,
    OutboundSent: _outbound,
    OutboundFailed: _outbound,
    MailAccountConnected: _account("connected"),
    MailAccountUpdated: _account("updated"),
    MailAccountDisconnected: _account("disconnected"),
    MailAccountReconnected: _account("reconnected"),
    MailAccountDeleted: _account("deleted"),
    MailAccountAuthFailed: _account("auth_failed"),
    MailAccountReauthRequired: _account("reauth_required"),
    FieldDefinitionDefined: _definition("defined"),
    FieldDefinitionUpdated: _definition("updated"),
    FieldDefinitionDeleted: _definition("deleted"),
    CustomFieldValueSet: _value("set"),
    CustomFieldValueCleared: _value("cleared"),
    CustomFieldValueExpired: _value("expired"),
}


# The topics of the events that become feed items (what the feed projection consumes).
TOPICS = frozenset(cls.TOPIC for cls in _BUILDERS)


def built(event: DomainEvent) -> Built | None:
    """(type, account id, data, sealed keys) of the event's item, or None for events
    with no public meaning: what ``entry_of`` gives, without the ``Entry``."""
    build = _BUILDERS.get(type(event))
    return None if build is None else build(event)


def entry_of(event: DomainEvent) -> Entry | None:
    """The feed entry of an event, or None for events with no public meaning."""
    parts = built(event)
    if parts is None:
        return None
    kind, account_id, data, sealed = parts
    tenant_id: str = getattr(event, "tenant_id")  # noqa: B009 - every mapped event has one
    return Entry(item_id(event), tenant_id, kind, account_id, data, sealed)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
