"""What set-mail-retention and get-mail-retention share: the policy that applies to a
tenant (its own, else the operator's default) and how it is shown."""

from __future__ import annotations

from typing import Any

from application.context import Context
from domain.mail_retention import MailRetention


def effective(own: MailRetention | None, ctx: Context) -> MailRetention:
    """The policy that applies: the tenant's own, else the operator's default."""
    return own if own is not None else ctx.policy.mail_retention_default


def view(own: MailRetention | None, ctx: Context) -> dict[str, Any]:
    return {
        "mailRetention": effective(own, ctx).to_json(),
        "source": "default" if own is None else "tenant",
        "default": ctx.policy.mail_retention_default.to_json(),
    }
