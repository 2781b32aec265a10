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
MAX_DEFINITIONS = 10_000


class WriteCache:
    def __init__(
        self, max_entities: int = MAX_ENTITIES, max_definitions: int = MAX_DEFINITIONS
    ) -> None:
        self.max_entities = max_entities
        self.max_definitions = max_definitions
        self._entities: OrderedDict[UUID, EntityCustomFields] = OrderedDict()
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
            return self._entities.pop(stream, None)

    def put_entity(self, entity: EntityCustomFields) -> None:
        """Keep an entity whose every event is committed (a newer one kept meanwhile by
        another thread stays)."""
        if entity.pending:
            return
        with self._lock:
            kept = self._entities.get(entity.id)
            if kept is None or kept.version < entity.version:
                self._entities[entity.id] = entity
            self._entities.move_to_end(entity.id)
            while len(self._entities) > self.max_entities:
                self._entities.popitem(last=False)

    def sizes(self) -> tuple[int, int]:
        """(entities, definitions) held now."""
        with self._lock:
            return len(self._entities), len(self._definitions)
