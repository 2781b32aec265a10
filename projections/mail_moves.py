"""The membership columns of the mail read model's ``messages`` table: a
``MessageFoldersChanged`` writes the message's whole ``folders`` (JSON, sorted names);
a ``MessageDeleted`` sets ``state`` to ``deleted`` (the row stays, like its events); a
``MessageRestored`` writes ``folders`` and the ``state`` from before the deletion.
``folder`` keeps the folder the message was found in. Both are whole values, so applying
an event twice or a rebuild gives the same row. ``folder_member`` is the reader's
membership test for ``list-messages``' ``folder`` filter."""

from __future__ import annotations

import json

from application.ports import SqlCursor
from domain.events import DomainEvent
from domain.message import MessageDeleted, MessageFoldersChanged, MessageRestored

MOVES = (MessageFoldersChanged, MessageDeleted, MessageRestored)  # what this module applies


def folders_json(folders: list[str]) -> str:
    """The ``folders`` column's text, as the arrival's insert writes it."""
    return json.dumps(folders, ensure_ascii=False)


def apply_membership(cur: SqlCursor, messages: str, event: DomainEvent) -> None:
    if isinstance(event, MessageFoldersChanged):
        cur.execute(
            f"UPDATE {messages} SET folders = ? WHERE message_id = ?",
            (folders_json(event.folders), str(event.originator_id)),
        )
    elif isinstance(event, MessageDeleted):
        cur.execute(
            f"UPDATE {messages} SET state = 'deleted' WHERE message_id = ?",
            (str(event.originator_id),),
        )
    elif isinstance(event, MessageRestored):
        cur.execute(
            f"UPDATE {messages} SET folders = ?, state = ? WHERE message_id = ?",
            (folders_json(event.folders), event.state, str(event.originator_id)),
        )


# ``folders`` as ", e1, e2," (the JSON list without its brackets, with a ", " before
# and a "," after): inside a JSON string every quote is escaped, so `, "name",` can
# only match a whole element. ``replace`` is case-sensitive on both backends (LIKE is
# not on SQLite).
_LISTED = "(', ' || substr(folders, 2, length(folders) - 2) || ',')"
FOLDER_MEMBER = f"((folders IS NULL AND folder = ?) OR replace({_LISTED}, ?, '') <> {_LISTED})"


def folder_member_params(folder: str) -> list[str]:
    """The parameters of ``FOLDER_MEMBER`` for ``folder``."""
    return [folder, ", " + json.dumps(folder, ensure_ascii=False) + ","]
