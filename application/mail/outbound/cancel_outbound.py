"""cancel-outbound: stop a message that is still waiting (queued or retrying); 409
``not_cancelable`` once an attempt holds it or it ended. Who may cancel: who may send
from the account."""

from __future__ import annotations

from uuid import UUID

from application.context import Context
from application.mail.access import can_see
from application.mail.outbound.access import can_send
from application.payloads import Payload as Base
from application.result import Result, forbidden, not_found
from application.streams import commit, load, retrying
from application.users import User
from domain.mail_account import MailAccount
from domain.outbound import NotCancelable, Outbound

NAME = "cancel-outbound"


class Payload(Base):
    outbound_id: str


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    try:
        stream = UUID(payload.outbound_id)
    except ValueError:
        return not_found(f"outbound message {payload.outbound_id}")

    def attempt() -> Result:
        outbound = load(ctx.store, Outbound, stream)
        if not outbound.exists or outbound.tenant_id != user.tenant_id:
            return not_found(f"outbound message {payload.outbound_id}")
        account = load(ctx.store, MailAccount, UUID(outbound.account_id))
        if not can_see(user, account.tenant_id, account.scope, account.owner_user_id):
            return not_found(f"outbound message {payload.outbound_id}")
        if not can_send(ctx, user, account):
            return forbidden()
        try:
            outbound.cancel(by=user.id, now=ctx.clock.now())
        except NotCancelable:
            return Result.fail(
                "not_cancelable",
                409,
                f"the message is {outbound.state}; only a waiting message can be canceled",
                state=outbound.state,
            )
        commit(ctx.store, outbound)
        return Result.ok({"outboundId": str(stream), "state": "canceled"})

    return retrying(attempt)
