"""list-messages: newest first, paged; filters by account, thread, state, unread,
flagged, folder (the folder a message was found in, by its decoded name) and direction."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from application.context import Context
from application.mail.folders import MAX_NAME_CHARS
from application.mail.listing import list_scope
from application.mail.views import message_view
from application.paging import DEFAULT_LIMIT, MAX_LIMIT, take_page
from application.payloads import Payload as Base
from application.result import Result
from application.users import User
from domain.message import Direction, ListedState

NAME = "list-messages"


class Payload(Base):
    account_id: str | None = None
    thread_key: str | None = None
    state: ListedState | None = None
    unread: bool | None = None
    flagged: bool | None = None
    folder: Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)] | None = None
    direction: Direction | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    cursor: str | None = None


def handle(payload: Payload, user: User, ctx: Context) -> Result:
    scope = list_scope(ctx, user, payload.account_id, payload.cursor)
    if isinstance(scope, Result):
        return scope
    rows = ctx.mail.read_model.messages(
        user.tenant_id,
        account_ids=scope.account_ids,
        thread_key=payload.thread_key,
        state=payload.state,
        unread=payload.unread,
        flagged=payload.flagged,
        folder=payload.folder,
        direction=payload.direction,
        limit=payload.limit + 1,
        after=scope.after,
    )
    rows, next_cursor = take_page(rows, payload.limit, lambda r: [r["receivedAt"], r["messageId"]])
    return Result.ok({"items": [message_view(ctx, r) for r in rows], "nextCursor": next_cursor})
