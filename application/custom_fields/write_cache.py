"""What set and clear read, kept per process: field definitions (replayed, with their
stream versions) and entity aggregates, each bounded, least recently used out first.

Nothing here is trusted to be current. A command that decided under cached definitions
names their streams and versions in its append, and the store checks them inside the
commit's transaction (``StaleRead`` when one moved on); a cached entity at an old version
collides with the newer event in the store (``ConcurrencyConflict``). Either way the
command forgets what it took from here and decides again on a fresh read
(docs/decisions/write-cache.md).

An entity is taken out while a command works on it and put back only once the command's
events are committed, so no two threads share an aggregate, and what is put back is
what the store holds (unless another process writes the entity too: then the next
command's commit collides and reads afresh).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from uuid import UUID

from domain.custom_field_values import EntityCustomFields
from domain.field_definition import FieldDefinition

MAX_ENTITIES = 10_000
MAX_ENTITY_BYTES = 64 * 1024 * 1024  # about: the sealed values' text (up to 64 KiB each)
MAX_DEFINITIONS = 10_000


def _weight(entity: EntityCustomFields) -> int:
    """About what an entity holds, in bytes: its sealed values' text, and a little."""
    return 200 + sum(len(v) if isinstance(v, str) else 64 for v in entity.values.values())


class WriteCache:
    def __init__(
        self,
        max_entities: int = MAX_ENTITIES,
        max_definitions: int = MAX_DEFINITIONS,
        max_entity_bytes: int = MAX_ENTITY_BYTES,
    ) -> None:
        self.max_entities = max_entities
        self.max_definitions = max_definitions
        self.max_entity_bytes = max_entity_bytes
        self._entities: OrderedDict[UUID, tuple[EntityCustomFields, int]] = OrderedDict()
        self._entity_bytes = 0
        self._definitions: OrderedDict[UUID, FieldDefinition] = OrderedDict()
        self._lock = threading.Lock()

    def definitions(self, streams: Sequence[UUID]) -> list[FieldDefinition] | None:
        """The cached definitions of all these streams, or None unless all are cached.
        A cached definition is never changed: readers share it."""
        with self._lock:
            found = [self._definitions.get(stream) for stream in streams]
            if any(d is None for d in found):
                return None
            for stream in streams:
                self._definitions.move_to_end(stream)
        return [d for d in found if d is not None]

    def keep_definitions(self, definitions: Sequence[FieldDefinition]) -> None:
        with self._lock:
            for definition in definitions:
                self._definitions[definition.id] = definition
                self._definitions.move_to_end(definition.id)
            while len(self._definitions) > self.max_definitions:
                self._definitions.popitem(last=False)

    def forget_definitions(self, streams: Sequence[UUID]) -> None:
        with self._lock:
            for stream in streams:
                self._definitions.pop(stream, None)

    def take_entity(self, stream: UUID) -> EntityCustomFields | None:
        """The cached entity, taken out (the caller owns it until it puts it back)."""
        with self._lock:
            kept = self._entities.pop(stream, None)
            if kept is None:
                return None
            self._entity_bytes -= kept[1]
            return kept[0]

    def put_entity(self, entity: EntityCustomFields) -> None:
        """Keep an entity whose every event is committed (a newer one kept meanwhile by
        another thread stays); the least recently used go while the count or the bytes
        are past their bounds (one entity past the byte bound alone is not kept)."""
        if entity.pending:
            return
        weight = _weight(entity)
        with self._lock:
            kept = self._entities.get(entity.id)
            if kept is None or kept[0].version < entity.version:
                self._entity_bytes += weight - (kept[1] if kept else 0)
                self._entities[entity.id] = (entity, weight)
            self._entities.move_to_end(entity.id)
            while self._entities and (
                len(self._entities) > self.max_entities
                or self._entity_bytes > self.max_entity_bytes
            ):
                self._entity_bytes -= self._entities.popitem(last=False)[1][1]

    def sizes(self) -> tuple[int, int, int]:
        """(entities, their bytes about, definitions) held now."""
        with self._lock:
            return len(self._entities), self._entity_bytes, len(self._definitions)
