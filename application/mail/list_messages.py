"""list-messages: newest first, paged; filters by account, thread and state."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from application.context import Context
from application.mail.access import accounts_in_scope
from application.mail.views import message_view
from application.paging import DEFAULT_LIMIT, MAX_LIMIT, BadCursor, decode_cursor, take_page
from application.payloads import Payload as Base
from application.result import Result, forbidden, invalid_payload
from application.users import KNOWN_ROLES, User
from domain.message import MessageState

NAME = "list-messages"


class Payload(Base):
    account_id: str | None = None
    thread_key: str | None = None
    state: MessageState | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    cursor: str | None = None


def page_after(cursor: str | None) -> tuple[str, str] | Result | None:
    if cursor is None:
        return None
    try:
        key = decode_cursor(cursor)
    except BadCursor:
        key = None
    if not (isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key)):
        return invalid_payload([{"path": "cursor", "message": "not a cursor from this list"}])
    return (key[0], key[1])


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    after = page_after(payload.cursor)
    if isinstance(after, Result):
        return after
    visible = accounts_in_scope(ctx, user, payload.account_id)
    if isinstance(visible, Result):
        return visible
    rows = ctx.mail.read_model.messages(
        user.tenant_id,
        account_ids=visible,
        thread_key=payload.thread_key,
        state=payload.state,
        limit=payload.limit + 1,
        after=after,
    )
    rows, next_cursor = take_page(rows, payload.limit, lambda r: [r["receivedAt"], r["messageId"]])
    return Result.ok({"items": [message_view(ctx, r) for r in rows], "nextCursor": next_cursor})
