"""Event log export and import as JSONL (replay fixtures, backups, moves).

One line per stored event, in log order::

    {"position": 1, "originatorId": "…", "originatorVersion": 1,
     "topic": "tidings.fields.FieldDefinitionDefined", "state": {"_v": 2, …}}

``state`` is the stored state decoded to a JSON object (never base64), so fixtures stay
readable and diffable. It is written back byte for byte as the codec writes it (compact
JSON, keys in file order), and old shapes (an older ``_v``) are imported as they are:
the codec upcasts them whenever they are read.

Export reads the log in short pages up to the head it saw at the start, so it runs in
constant memory and ends even while writers carry on. Import is outside input: every
event is checked against its class (``eventstore.validation``: field types, storable
values, sealed tokens of its own tenant only) and refused with its line number; the
whole file is appended in one transaction, in chunks of ``CHUNK_SIZE`` events, so a
bad line or a conflict anywhere leaves nothing written. Streams, versions and the
relative order of events are kept; positions are the target log's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO
from uuid import UUID

from application.errors import ConcurrencyConflict
from infrastructure.eventstore.recorder import RecorderEventStore
from infrastructure.eventstore.validation import (
    EventTypes,
    InvalidEvent,
    StreamTenants,
    check_owner,
    check_values,
)

PAGE_SIZE = 1000
CHUNK_SIZE = 500
MAX_LINE_CHARS = 8 * 1024 * 1024  # far above any event the codec writes (payloads <= 1 MiB)

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
    def __init__(self, first_line: int, last_line: int) -> None:
        super().__init__(
            f"lines {first_line}-{last_line}: a (stream, version) already exists in the store"
            " or earlier in the file; nothing was imported"
        )
        self.imported = 0


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


def read_lines(handle: TextIO, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
    """The file's lines, none read past ``limit`` characters: an over-long line is
    yielded cut (``parse_lines`` refuses it) and reading stops there."""
    while line := handle.readline(limit + 1):
        yield line
        if len(line) > limit:
            return


def _field(record: dict[str, Any], key: str, kind: type, line: int) -> Any:
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadRecord(line, f"{key!r} must be a {kind.__name__}")
    return value


class _Checker:
    """One record's checks, with the per-class type adapters built once per import."""

    def __init__(self, store: RecorderEventStore) -> None:
        self.codec = store.codec
        self.types = EventTypes(store.codec.classes)
        self.tenants = StreamTenants()

    def row(self, number: int, text: str, *, validate: bool) -> tuple[StoredRow, int | None]:  # noqa: C901
        if len(text) > MAX_LINE_CHARS:
            raise BadRecord(number, f"longer than {MAX_LINE_CHARS} characters")
        try:
            record = json.loads(text)
        except RecursionError:
            raise BadRecord(number, "nested too deeply") from None
        except ValueError as error:
            raise BadRecord(number, f"not JSON ({error})") from None
        if not isinstance(record, dict):
            raise BadRecord(number, "expected a JSON object")
        try:
            stream = UUID(_field(record, "originatorId", str, number))
        except ValueError:
            raise BadRecord(number, "'originatorId' must be a UUID") from None
        version = _field(record, "originatorVersion", int, number)
        if not 1 <= version <= 2**53 - 1:
            raise BadRecord(number, "'originatorVersion' must be between 1 and 2^53 - 1")
        topic = _field(record, "topic", str, number)
        state = _field(record, "state", dict, number)
        position = _field(record, "position", int, number) if "position" in record else None
        if topic not in self.codec.classes:
            raise BadRecord(number, f"unknown topic {topic!r}")
        try:
            check_values(state)
        except InvalidEvent as invalid:
            raise BadRecord(number, f"state does not fit {topic}: {invalid}") from None
        try:
            encoded = json.dumps(state, ensure_ascii=False, separators=(",", ":")).encode()
        except (UnicodeEncodeError, ValueError, RecursionError) as error:  # a lone surrogate…
            raise BadRecord(number, f"state cannot be stored: {type(error).__name__}") from None
        if validate:
            self._check(number, stream, version, topic, encoded)
        return (stream, version, topic, encoded), position

    def _check(self, number: int, stream: UUID, version: int, topic: str, encoded: bytes) -> None:
        try:
            event = self.codec.decode(stream, version, topic, encoded)
            self.types.check(event)
            check_owner(event)
            self.tenants.check(event)
        except KeyError as missing:
            raise BadRecord(number, f"state does not fit {topic}: no {missing}") from None
        except (TypeError, ValueError) as error:  # InvalidEvent included
            raise BadRecord(number, f"state does not fit {topic}: {error}") from None


def parse_lines(
    lines: Iterable[str], store: RecorderEventStore, *, decode: bool = True
) -> Iterator[ParsedLine]:
    """Parse and check each record: its envelope, its topic, its values and (``decode``)
    that it is an event of its class with its own tenant's tokens only, upcasting an
    old shape — so a bad file fails before it reaches the store rather than breaking a
    projection or revealing another tenant's data later."""
    checker = _Checker(store)
    last_position = 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        row, position = checker.row(number, text, validate=decode)
        if position is not None:
            if position <= last_position:
                raise BadRecord(number, f"position {position} is not after {last_position}")
            last_position = position
        yield ParsedLine(number, row)


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
    """Append the file's events in order, in one transaction, ``chunk_size`` per insert;
    answer how many. A bad line or a conflict anywhere writes nothing.

    Refuses a non-empty store unless ``append``. ``checked``: the lines went through
    ``check_lines`` already, so states need not be decoded again. ``on_chunk(inserted)``
    after each chunk (inserted, not yet committed).
    """
    if not append and (head := store.head()) > 0:
        raise StoreNotEmpty(head)
    span = [0, 0]  # the file lines of the chunk being inserted

    def chunks() -> Iterator[list[StoredRow]]:
        inserted = 0
        chunk: list[ParsedLine] = []
        for parsed in parse_lines(lines, store, decode=not checked):
            chunk.append(parsed)
            if len(chunk) >= chunk_size:
                span[:] = [chunk[0].line, chunk[-1].line]
                yield [p.row for p in chunk]
                inserted += len(chunk)
                chunk = []
                if on_chunk is not None:
                    on_chunk(inserted)
        if chunk:
            span[:] = [chunk[0].line, chunk[-1].line]
            yield [p.row for p in chunk]
            if on_chunk is not None:
                on_chunk(inserted + len(chunk))

    try:
        return store.append_stored_atomically(chunks())
    except ConcurrencyConflict:
        raise ImportConflict(span[0], span[1]) from None
