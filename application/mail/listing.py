"""What every mail list (``list-messages``, ``list-threads``) does before reading rows: the
role check, the cursor decoded, the accounts the caller may see."""

from __future__ import annotations

from dataclasses import dataclass

from application.context import Context
from application.mail.access import accounts_in_scope
from application.paging import BadCursor, decode_cursor
from application.result import Result, forbidden, invalid_payload
from application.users import KNOWN_ROLES, User


@dataclass(frozen=True)
class ListScope:
    account_ids: list[str]
    after: tuple[str, str] | None  # the (sort key, id) of the last row of the page before


def list_scope(
    ctx: Context, user: User, account_id: str | None, cursor: str | None
) -> ListScope | Result:
    """The scope of one page of a list, or the refusal to answer with."""
    if not user.has_any(KNOWN_ROLES):
        return forbidden()
    after = page_after(cursor)
    if isinstance(after, Result):
        return after
    visible = accounts_in_scope(ctx, user, account_id)
    if isinstance(visible, Result):
        return visible
    return ListScope(visible, after)


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
