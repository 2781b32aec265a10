"""Gmail's labels of a selected folder (``read_labels``): ``UID FETCH span (UID
X-GM-LABELS)`` in spans of ``search_span`` UIDs, as the flag reads go, each line read
with the LIST tokenizer's bounds (``list_response.responses``: at most 512 tokens per
line, 64 KiB per token). A label is a quoted string, an atom or a literal in modified
UTF-7; one that does not decode is left out (the application's bounds count the rest).
A line that does not tokenize but names its UID reads as "labels unknown" for that UID
(its message is held, not moved); a line without a UID is not counted, so the answer's
count falls short of EXISTS and the folder is not believed.
"""

from __future__ import annotations

import re
from typing import Any

from application.mail.gmail_labels import FolderLabels
from application.mail.ports import MailboxStatus
from infrastructure.imap.connection import Connection
from infrastructure.imap.flags import uid_spans
from infrastructure.imap.identity import valid_id
from infrastructure.imap.list_response import Atom, decode_name, responses

_UID = re.compile(rb"[0-9]{1,10} \(.*?\bUID ([0-9]{1,10})\b", re.IGNORECASE | re.DOTALL)


def read_labels(conn: Connection, status: MailboxStatus) -> FolderLabels:
    """Every UID's labels in the folder ``status`` was read from (EXAMINEd just before)."""
    labels: dict[int, tuple[str, ...] | None] = {}
    if status.exists > 0:
        for span in uid_spans(status.uidnext, conn.settings.search_span):
            labels.update(parse_label_lines(conn.io(fetch_label_lines, conn.client, span)))
    uids = frozenset(labels)
    believed = len(uids) == status.exists and (
        status.uidnext is None or all(u < status.uidnext for u in uids)
    )
    return FolderLabels(status.uidvalidity, uids if believed else None, labels)


def fetch_label_lines(client: Any, span: str) -> list[Any]:
    """``UID FETCH span (UID X-GM-LABELS)``: imaplib's untagged FETCH data."""
    imap = client._imap
    imap.untagged_responses.pop("FETCH", None)  # earlier news is not this answer
    tag = imap._command("UID", "FETCH", span, "(UID X-GM-LABELS)")
    typ, data = imap._command_complete("FETCH", tag)
    client._checkok("fetch", typ, data)
    typ, data = imap._untagged_response(typ, data, "FETCH")
    return list(data)


def parse_label_lines(data: list[Any]) -> dict[int, tuple[str, ...] | None]:
    """Labels by UID from imaplib's FETCH data (a UID answered twice keeps its last)."""
    out: dict[int, tuple[str, ...] | None] = {}
    lines = _raw_lines(data)
    for raw, tokens in zip(lines, responses(data), strict=False):
        entry = _entry(tokens) if tokens is not None else None
        if entry is not None:
            out[entry[0]] = entry[1]
            continue
        m = _UID.match(raw)
        if m is not None and valid_id(int(m[1])):
            out[int(m[1])] = None
    return out


def _raw_lines(data: list[Any]) -> list[bytes]:
    """The text before each response's first literal (where its UID is), one per
    response as ``responses`` yields them."""
    out: list[bytes] = []
    first: bytes | None = None
    for item in data:
        if item is None:
            continue
        if type(item) is tuple and len(item) == 2:
            if first is None:
                first = item[0] if type(item[0]) is bytes else b""
            continue
        out.append(first if first is not None else (item if type(item) is bytes else b""))
        first = None
    if first is not None:
        out.append(first)
    return out


def _entry(tokens: list[Any]) -> tuple[int, tuple[str, ...]] | None:  # noqa: PLR0911
    """``seq ( UID n X-GM-LABELS ( l ... ) )`` in any order: (uid, decoded labels)."""
    if len(tokens) < 3 or tokens[1] != "(" or tokens[-1] != ")":
        return None
    items, i = tokens[2:-1], 0
    uid: int | None = None
    labels: tuple[str, ...] | None = None
    while i < len(items):
        key = items[i]
        if not isinstance(key, Atom):
            return None
        name = bytes(key).upper()
        if name == b"UID" and i + 1 < len(items) and isinstance(items[i + 1], Atom):
            text = bytes(items[i + 1])
            uid = int(text) if text.isdigit() and len(text) <= 10 else None
            i += 2
        elif name == b"X-GM-LABELS" and i + 1 < len(items) and items[i + 1] == "(":
            end = items.index(")", i + 1) if ")" in items[i + 1 :] else -1
            if end < 0:
                return None
            values = items[i + 2 : end]
            if any(v == "(" for v in values):
                return None
            labels = tuple(d for v in values if (d := _label(v)) is not None)
            i = end + 1
        else:
            return None
    if uid is None or not valid_id(uid) or labels is None:
        return None
    return uid, labels


def _label(value: Any) -> str | None:
    if isinstance(value, str):  # a parenthesis: not a label
        return None
    raw = bytes(value)
    if isinstance(value, Atom) and raw.upper() == b"NIL":
        return None
    return decode_name(raw)
