"""The retention sweep of custom-field values (a ``RetentionSweep``).

A batch: the live definitions with a retention (one small read), walked one after
the other in id order, each with its cutoff (``now - keepFor``); one statement over the
read model finds the next values of the current one set at or before it, each with its
entity's stream version as the read model knows it. Each entity, restored from that
(``EntityCustomFields.known``), records a ``CustomFieldValueExpired`` at the next
version (``expire_value``), and all of them go in one append: no stream is loaded. If
any stream moved past the read model's version (a writer, another sweeper, a read
model behind the log), that version is taken and the append conflicts as a whole;
the batch is then decided again from the streams themselves (one read loads them), as
often as a conflict repeats, so each expiry is recorded once and a value set again
since is kept.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from application.context import Context
from application.custom_fields.ports import DueValue, ExpiringValues, RetainedDefinition
from application.custom_fields.sealing import seal_value
from application.errors import ConcurrencyConflict
from application.privacy import KeyErased
from application.retention.ports import SweepBatch
from application.streams import ATTEMPTS, commit, replay
from domain.custom_field_values import EntityCustomFields, entity_stream_id
from domain.field_types import anonymous_value, check_field_spec
from domain.retention import from_micros, micros


class ValueSweep:
    kind = "custom_field_values"

    def __init__(self, ctx: Context, values: ExpiringValues) -> None:
        self.ctx = ctx
        self.values = values

    def batch(self, now: datetime, after: Any, limit: int, dry_run: bool) -> SweepBatch:
        """``after``: (definition id, position in its walk or None); the definitions are
        walked one after the other, in id order, each from its oldest due value."""
        definitions = {d.definition_id: d for d in self.values.retained_definitions()}
        ids = sorted(definitions)
        current, position = after if after is not None else (None, None)
        ids = [i for i in ids if current is None or i >= current]
        if not ids:
            return SweepBatch()
        definition = definitions[ids[0]]
        if ids[0] != current:
            position = None  # that definition is gone: the next one, from its start
        cutoff = definition.retention.cutoff(now)
        due = self.values.due(definition, micros(cutoff), position, limit)
        batch = SweepBatch(found=len(due))
        if len(due) == limit:
            batch.next = (definition.definition_id, due[-1].position)
        elif len(ids) > 1:
            batch.next = (ids[1], None)
        action = definition.retention.action
        for value in due:
            batch.counts[value.tenant_id, f"{value.entity_name}.{value.field_key}", action] += 1
        if due and not dry_run:
            batch.recorded = self._record(due, definition, cutoff, now)
        return batch

    def _record(
        self, due: list[DueValue], definition: RetainedDefinition, cutoff: datetime, now: datetime
    ) -> int:
        if all(value.version is not None for value in due):
            try:
                return self._record_known(due, definition, cutoff, now)
            except ConcurrencyConflict:
                pass  # a stream moved past the read model: decide from the streams
        return self._record_loaded(due, definition, cutoff, now)

    def _record_known(
        self, due: list[DueValue], definition: RetainedDefinition, cutoff: datetime, now: datetime
    ) -> int:
        """Decide from the read model: each entity at its known version, holding the
        due value; the append's version check is the only read of the log."""
        streams = self._streams(due)
        entities: dict[UUID, EntityCustomFields] = {}
        for value in due:
            assert value.version is not None
            entity = entities.get(streams[value])
            if entity is None:
                entity = entities[streams[value]] = EntityCustomFields.at(
                    streams[value], value.version
                )
            entity.know(
                field_key=value.field_key,
                definition_id=value.definition_id,
                generation=value.generation,
                set_at=from_micros(value.set_at),
            )
        recorded = sum(
            self._expire(entities[streams[value]], value, definition, cutoff, now) for value in due
        )
        commit(self.ctx.store, *entities.values())
        return recorded

    def _record_loaded(
        self, due: list[DueValue], definition: RetainedDefinition, cutoff: datetime, now: datetime
    ) -> int:
        """Decide from the streams themselves, loaded in one read; again on a conflict."""
        for _ in range(ATTEMPTS):
            streams = self._streams(due)
            loaded = self.ctx.store.load_many(set(streams.values()))
            # In the order of ``due``: the order the expiries are told.
            entities = {
                s: replay(EntityCustomFields, s, loaded[s]) for s in dict.fromkeys(streams.values())
            }
            recorded = sum(
                self._expire(entities[streams[value]], value, definition, cutoff, now)
                for value in due
            )
            try:
                commit(self.ctx.store, *entities.values())
            except ConcurrencyConflict:
                continue
            return recorded
        raise ConcurrencyConflict("retention: the values' streams kept moving")

    @staticmethod
    def _streams(due: list[DueValue]) -> dict[DueValue, UUID]:
        return {v: entity_stream_id(v.tenant_id, v.entity_name, v.entity_id) for v in due}

    def _expire(
        self,
        entity: EntityCustomFields,
        value: DueValue,
        definition: RetainedDefinition,
        cutoff: datetime,
        now: datetime,
    ) -> bool:
        return entity.expire_value(
            tenant_id=value.tenant_id,
            entity_name=value.entity_name,
            entity_id=value.entity_id,
            field_key=value.field_key,
            definition_id=UUID(value.definition_id),
            generation=value.generation,
            action=definition.retention.action,
            cutoff=cutoff,
            anonymous=self._anonymous(value, definition),
            now=now,
        )

    def _anonymous(self, value: DueValue, definition: RetainedDefinition) -> tuple[str, str] | None:
        """The sealed anonymous form of the value's type (None: it is removed)."""
        if definition.retention.action != "anonymize":
            return None
        field = dict(definition.field)
        spec = check_field_spec(field.pop("type"), field)
        form = anonymous_value(spec)
        if form is None:
            return None
        try:
            return seal_value(
                self.ctx,
                value.tenant_id,
                entity_name=value.entity_name,
                entity_id=value.entity_id,
                field_key=value.field_key,
                value=form,
            )
        except KeyErased:
            return None  # a shredded tenant: nothing of it is readable, nothing is kept
