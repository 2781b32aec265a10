"""Event log export and import as JSONL (SPEC §8: replay fixtures, backups, moves).

One line per stored event, in log order::

    {"position": 1, "originatorId": "…", "originatorVersion": 1,
     "topic": "tidings.fields.FieldDefinitionDefined", "state": {"_v": 2, …}}

``state`` is the stored state decoded to a JSON object (never base64), so fixtures stay
readable and diffable. It is written back byte for byte as the codec writes it (compact
JSON, keys in file order), and old shapes (an older ``_v``) are imported as they are:
the codec upcasts them whenever they are read.

Export reads the log in short pages up to the head it saw at the start, so it runs in
constant memory and ends even while writers carry on. Import appends in chunks of
``CHUNK_SIZE`` events, each chunk one atomic insert, in file order: streams, versions
and the relative order of events are kept; positions are the target log's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO
from uuid import UUID

from application.errors import ConcurrencyConflict
from infrastructure.eventstore.recorder import RecorderEventStore

PAGE_SIZE = 1000
CHUNK_SIZE = 500

StoredRow = tuple[UUID, int, str, bytes]


class EventsIOError(Exception):
    """Base class of export/import failures an operator can act on."""


class StoreNotEmpty(EventsIOError):
    def __init__(self, head: int) -> None:
        super().__init__(
            f"the event store is not empty (head position {head}); "
            "import into an empty store, or pass --append"
        )
        self.head = head


class BadRecord(EventsIOError):
    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


class ImportConflict(EventsIOError):
    def __init__(self, first_line: int, last_line: int, imported: int) -> None:
        super().__init__(
            f"lines {first_line}-{last_line}: a (stream, version) already exists in the store; "
            f"{imported} events were imported before it"
        )
        self.imported = imported


# --- export --------------------------------------------------------------------------


def export_record(
    position: int, originator_id: UUID | str, version: int, topic: str, state: bytes
) -> dict[str, Any]:
    return {
        "position": position,
        "originatorId": str(UUID(str(originator_id))),
        "originatorVersion": version,
        "topic": topic,
        "state": json.loads(state),
    }


def export_events(
    store: RecorderEventStore,
    out: TextIO,
    *,
    page_size: int = PAGE_SIZE,
    on_page: Callable[[int, int], None] | None = None,
) -> int:
    """Write every event up to the current head as JSONL; answer how many.

    ``on_page(done, total)`` is called after each page (``total`` is the head position,
    an upper bound of the count when the log has gaps).
    """
    head = store.head()
    after = written = 0
    while after < head:
        page = store.read_raw(after, min(page_size, head - after))
        if not page:
            break
        for n in page:
            if n.id > head:
                break
            record = export_record(n.id, n.originator_id, n.originator_version, n.topic, n.state)
            out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
            out.write("\n")
            written += 1
        after = page[-1].id
        if on_page is not None:
            on_page(written, head)
    return written


# --- import --------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedLine:
    line: int
    row: StoredRow


def _field(record: dict[str, Any], key: str, kind: type, line: int) -> Any:
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadRecord(line, f"{key!r} must be a {kind.__name__}")
    return value


def parse_lines(
    lines: Iterable[str], store: RecorderEventStore, *, decode: bool = True
) -> Iterator[ParsedLine]:
    """Parse and check each record: its envelope, its topic, and (``decode``) that the
    codec can read its state, upcasting an old shape — so a bad file fails before it
    reaches the store rather than breaking a projection later."""
    last_position = 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except ValueError as error:
            raise BadRecord(number, f"not JSON ({error})") from None
        if not isinstance(record, dict):
            raise BadRecord(number, "expected a JSON object")
        try:
            stream = UUID(_field(record, "originatorId", str, number))
        except ValueError:
            raise BadRecord(number, "'originatorId' must be a UUID") from None
        version = _field(record, "originatorVersion", int, number)
        if version < 1:
            raise BadRecord(number, "'originatorVersion' must be 1 or more")
        topic = _field(record, "topic", str, number)
        state = _field(record, "state", dict, number)
        if "position" in record:
            position = _field(record, "position", int, number)
            if position <= last_position:
                raise BadRecord(number, f"position {position} is not after {last_position}")
            last_position = position
        try:
            encoded = json.dumps(state, ensure_ascii=False, separators=(",", ":")).encode()
        except (UnicodeEncodeError, ValueError, RecursionError) as error:  # a lone surrogate…
            raise BadRecord(number, f"state cannot be stored: {type(error).__name__}") from None
        if topic not in store.codec.classes:
            raise BadRecord(number, f"unknown topic {topic!r}")
        try:
            if decode:
                store.codec.decode(stream, version, topic, encoded)
        except KeyError as missing:
            raise BadRecord(number, f"state does not fit {topic}: no {missing}") from None
        except (TypeError, ValueError) as error:
            raise BadRecord(number, f"state does not fit {topic}: {error}") from None
        yield ParsedLine(number, (stream, version, topic, encoded))


def check_lines(lines: Iterable[str], store: RecorderEventStore) -> int:
    """Parse every record without writing; answer how many events there are."""
    return sum(1 for _ in parse_lines(lines, store))


def import_events(
    store: RecorderEventStore,
    lines: Iterable[str],
    *,
    append: bool = False,
    chunk_size: int = CHUNK_SIZE,
    checked: bool = False,
    on_chunk: Callable[[int], None] | None = None,
) -> int:
    """Append the file's events in order, ``chunk_size`` per atomic insert; answer how many.

    Refuses a non-empty store unless ``append``. ``checked``: the lines went through
    ``check_lines`` already, so states need not be decoded again. ``on_chunk(imported)``
    after each chunk.
    """
    if not append and (head := store.head()) > 0:
        raise StoreNotEmpty(head)
    imported = 0
    chunk: list[ParsedLine] = []

    def flush() -> None:
        nonlocal imported
        try:
            store.append_stored([parsed.row for parsed in chunk])
        except ConcurrencyConflict:
            raise ImportConflict(chunk[0].line, chunk[-1].line, imported) from None
        imported += len(chunk)
        chunk.clear()
        if on_chunk is not None:
            on_chunk(imported)

    for parsed in parse_lines(lines, store, decode=not checked):
        chunk.append(parsed)
        if len(chunk) >= chunk_size:
            flush()
    if chunk:
        flush()
    return imported
