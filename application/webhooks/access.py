"""Who manages webhooks, and the checks every webhook handler shares."""

from __future__ import annotations

import secrets

from application.context import Context
from application.destinations import ALLOW_SETTING, HostNotAllowed, HostUnresolved
from application.result import Result
from application.users import SYSTEM_ADMIN, TENANT_ADMIN, User
from domain.webhook import BadEventFilter, BadWebhookUrl, check_filters, parse_url

SECRET_PURPOSE = "webhook-secret"  # noqa: S105 - a sealing purpose, not a secret
SECRET_PREFIX = "whsec_"  # noqa: S105 - the shape of generated secrets


def may_manage(user: User) -> bool:
    """Tenant admins manage their tenant's webhooks; system admins the system tenant's."""
    return TENANT_ADMIN in user.roles or (user.in_system_tenant and SYSTEM_ADMIN in user.roles)


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def invalid(path: str, message: str) -> Result:
    return Result.fail(
        "invalid_payload",
        400,
        "the payload is invalid",
        errors=[{"path": path, "message": message}],
    )


def checked_url(ctx: Context, url: str) -> Result | None:
    """None when ``url`` is acceptable now; else the failed result to answer."""
    try:
        target = parse_url(url)
    except BadWebhookUrl as error:
        return invalid("url", str(error))
    try:
        ctx.mail.destinations.check(target.host, target.port)
    except (HostNotAllowed, HostUnresolved):
        # One answer for both: telling them apart would tell a tenant which internal
        # names exist.
        return Result.fail(
            "host_not_allowed",
            422,
            "the webhook host does not resolve to a public address; set"
            f" {ALLOW_SETTING}=true to allow private ones",
            host=target.host,
            setting=ALLOW_SETTING,
        )
    return None


def checked_filters(events: list[str]) -> list[str] | Result:
    try:
        return check_filters(events)
    except BadEventFilter as error:
        return invalid("events", str(error))
