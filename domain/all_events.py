"""Every event class the store may hold, listed explicitly (no import-time registry)."""

from domain import (
    api_key,
    custom_field_values,
    field_definition,
    mail_account,
    mail_retention,
    message,
    message_retention,
    outbound,
)
from domain.events import DomainEvent

EVENT_CLASSES: tuple[type[DomainEvent], ...] = (
    *field_definition.EVENTS,
    *custom_field_values.EVENTS,
    *mail_account.EVENTS,
    *message.EVENTS,
    *message_retention.EVENTS,
    *api_key.EVENTS,
    *mail_retention.EVENTS,
    *outbound.EVENTS,
)
