"""The table of write handlers and queries that ``App.write`` / ``App.query`` dispatch to.

Each use case is one module exposing ``NAME``, ``Payload`` and ``handle``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from application.api_keys import create_api_key, list_api_keys, revoke_api_key
from application.custom_fields import (
    clear_custom_field,
    define_system_field,
    define_tenant_field,
    delete_system_field,
    delete_tenant_field,
    get_entity,
    list_entities,
    list_field_definitions,
    set_custom_field,
    update_tenant_field,
)
from application.feed import read_feed
from application.mail import (
    connect_mail_account,
    delete_mail_account,
    disconnect_mail_account,
    get_attachment,
    get_mail_account_timeline,
    get_message,
    ingest_message,
    list_mail_accounts,
    list_messages,
    list_tenant_health,
    list_threads,
    reconnect_mail_account,
    sync_account_now,
    update_mail_account,
    user_active,
)
from application.mail.outbound import (
    cancel_outbound,
    get_outbound,
    list_outbound,
    send_message,
)
from application.payloads import Payload
from application.tenants import get_mail_retention, set_mail_retention, shred_tenant
from application.webhooks import (
    create_webhook,
    delete_webhook,
    list_webhook_deliveries,
    list_webhooks,
    redeliver_webhook,
    rotate_webhook_secret,
    update_webhook,
)


@dataclass(frozen=True)
class UseCase:
    name: str
    payload: type[Payload]
    handle: Callable[..., Any]
    appends: bool = True  # False: never writes to the log (no inline catch-up after it)


def _table(*modules: ModuleType) -> dict[str, UseCase]:
    return {
        m.NAME: UseCase(m.NAME, m.Payload, m.handle, getattr(m, "APPENDS", True)) for m in modules
    }


WRITES = _table(
    define_tenant_field,
    update_tenant_field,
    delete_tenant_field,
    define_system_field,
    delete_system_field,
    set_custom_field,
    clear_custom_field,
    connect_mail_account,
    update_mail_account,
    disconnect_mail_account,
    reconnect_mail_account,
    delete_mail_account,
    ingest_message,
    sync_account_now,
    user_active,
    create_api_key,
    revoke_api_key,
    shred_tenant,
    set_mail_retention,
    create_webhook,
    update_webhook,
    delete_webhook,
    rotate_webhook_secret,
    redeliver_webhook,
    send_message,
    cancel_outbound,
)
QUERIES = _table(
    list_field_definitions,
    get_entity,
    list_entities,
    list_mail_accounts,
    get_mail_account_timeline,
    list_tenant_health,
    list_messages,
    get_message,
    get_attachment,
    list_threads,
    read_feed,
    list_webhooks,
    list_webhook_deliveries,
    list_api_keys,
    get_mail_retention,
    list_outbound,
    get_outbound,
)

# Use cases that may connect to a server a tenant names (a verify, with its token
# refresh): the HTTP API runs them apart from everything else, capped per tenant.
DIALS_OUT = frozenset({connect_mail_account.NAME})
