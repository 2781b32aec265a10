"""In-memory stand-ins for the application's ports. They live in tests/, never in the
package (STYLE convention 5)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from application.errors import ConcurrencyConflict, StaleRead, StoreUnavailable
from application.ports import ProjectionStatus
from application.privacy import KeyErased
from domain.events import DomainEvent


class FakeEventStore:
    """Implements ``EventStore``: atomic appends, a conflict on a taken (stream, version)."""

    def __init__(self) -> None:
        self.streams: dict[UUID, list[DomainEvent]] = defaultdict(list)
        self.appends: list[list[DomainEvent]] = []
        self.conflicts_to_raise = 0  # simulate that many racing writers getting there first
        self.unavailable = False

    def load(self, stream_id: UUID) -> list[DomainEvent]:
        if self.unavailable:
            raise StoreUnavailable("fake store is down")
        return list(self.streams.get(stream_id, []))

    def load_many(self, stream_ids: Iterable[UUID]) -> dict[UUID, list[DomainEvent]]:
        return {stream: self.load(stream) for stream in stream_ids}

    def existing(self, stream_ids: Iterable[UUID]) -> set[UUID]:
        if self.unavailable:
            raise StoreUnavailable("fake store is down")
        return {s for s in stream_ids if self.streams.get(s)}

    def append(
        self, events: Sequence[DomainEvent], expected: Mapping[UUID, int] | None = None
    ) -> None:
        if self.unavailable:
            raise StoreUnavailable("fake store is down")
        for stream, version in (expected or {}).items():
            if len(self.streams.get(stream, [])) != version:
                raise StaleRead(f"{stream} is no longer at v{version}")
        if self.conflicts_to_raise:
            self.conflicts_to_raise -= 1
            raise ConcurrencyConflict("fake conflict")
        next_version: dict[UUID, int] = {}
        for event in events:
            stream = event.originator_id
            wanted = next_version.get(stream, len(self.streams.get(stream, [])) + 1)
            if event.originator_version != wanted:
                raise ConcurrencyConflict(f"{stream} v{event.originator_version} is taken")
            next_version[stream] = wanted + 1
        for event in events:
            self.streams[event.originator_id].append(event)
        self.appends.append(list(events))

    @property
    def events(self) -> list[DomainEvent]:
        return [event for batch in self.appends for event in batch]


class FixedClock:
    def __init__(self, now: datetime = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current


class FakeReadModel:
    """Implements ``CustomFieldsReadModel`` over dicts the test fills in; records calls."""

    def __init__(self) -> None:
        self.definitions: list[dict[str, Any]] = []  # each with "tenantId" for filtering
        self.entities: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
        self.calls: list[tuple[Any, ...]] = []

    def list_definitions(self, tenant_id: str, entity_name: str | None) -> list[dict[str, Any]]:
        self.calls.append(("list_definitions", tenant_id, entity_name))
        return [
            {k: v for k, v in d.items() if k != "tenantId"}
            for d in self.definitions
            if d["tenantId"] in (tenant_id, "system") and entity_name in (None, d["entityName"])
        ]

    def get_entity(self, tenant_id: str, entity_name: str, entity_id: str) -> dict[str, Any] | None:
        self.calls.append(("get_entity", tenant_id, entity_name, entity_id))
        fields = self.entities[tenant_id, entity_name].get(entity_id)
        if fields is None:
            return None
        return {"entityName": entity_name, "entityId": entity_id, "customFields": dict(fields)}

    def list_entities(
        self,
        tenant_id: str,
        entity_name: str,
        where: Mapping[str, Any],
        limit: int,
        after: str | None,
    ) -> list[dict[str, Any]]:
        self.calls.append(("list_entities", tenant_id, entity_name, dict(where), limit, after))
        rows = sorted(self.entities[tenant_id, entity_name].items())
        return [
            {"entityId": entity_id, "customFields": dict(fields)}
            for entity_id, fields in rows
            if (after is None or entity_id > after)
            and all(_matches(fields.get(k), m) for k, m in where.items())
        ][:limit]


def _matches(cell: Any, match: Any) -> bool:
    if isinstance(cell, dict) and cell.keys() == {"s", "d"}:
        return bool(cell["d"] in match.digests)
    return bool(cell == match.value)


class FakeCipher:
    """Implements ``PiiCipher`` with reversible, owner-bound tokens (no cryptography):
    ``fake:`` + base64 of the JSON of (tenant, account, purpose, plaintext); digests are
    plain hashes.
    ``shredded`` tenants seal nothing and reveal nothing."""

    def __init__(self) -> None:
        self.shredded: set[str] = set()

    def seal(
        self, tenant_id: str, account_id: str | None, plaintext: str, purpose: str = "pii"
    ) -> str:
        if tenant_id in self.shredded:
            raise KeyErased(tenant_id)
        sealed = json.dumps([tenant_id, account_id, purpose, plaintext]).encode()
        return "fake:" + base64.b64encode(sealed).decode()

    def sealer(
        self, tenant_id: str, account_id: str | None, purpose: str = "pii"
    ) -> Callable[[str], str]:
        return lambda plaintext: self.seal(tenant_id, account_id, plaintext, purpose)

    def body_sealer(
        self, tenant_id: str, account_id: str, body_ref: str | None, purpose: str = "pii"
    ) -> Callable[[str], str]:
        return self.sealer(tenant_id, account_id, purpose)

    def reveal(
        self,
        token: str,
        tenant_id: str,
        account_id: str | None,
        purpose: str = "pii",
        *,
        sealing: bool = False,
    ) -> str | None:
        if not token.startswith("fake:") or tenant_id in self.shredded:
            return None
        tenant, account, sealed_for, plaintext = json.loads(base64.b64decode(token[5:]))
        if (tenant, account, sealed_for) != (tenant_id, account_id, purpose):
            return None
        return str(plaintext)

    def digest(self, tenant_id: str, purpose: str, text: str) -> str:
        if tenant_id in self.shredded:
            raise KeyErased(tenant_id)
        return hashlib.sha256(json.dumps([tenant_id, purpose, text]).encode()).hexdigest()

    def digester(self, tenant_id: str, purpose: str) -> Callable[[str], str]:
        return lambda text: self.digest(tenant_id, purpose, text)

    def shred_account(self, tenant_id: str, account_id: str) -> None:
        raise NotImplementedError

    def shred_tenant(self, tenant_id: str) -> None:
        self.shredded.add(tenant_id)

    def tenant_shredded(self, tenant_id: str) -> bool:
        return tenant_id in self.shredded


class FakeProjections:
    """Implements ``Projections``: counts catch-ups."""

    def __init__(self) -> None:
        self.catch_ups = 0
        self.unavailable = False

    def catch_up(self) -> int:
        self.catch_ups += 1
        if self.unavailable:
            raise StoreUnavailable("read-model database is busy")
        return 0

    def rebuild(self, name: str | None = None, progress: Any = None) -> None:
        return None

    def status(self) -> list[ProjectionStatus]:
        return []

    def follow(self, stop: Any, interval: float = 0.5) -> Any:
        return iter(())

    def quarantined(self, name: str | None = None, limit: int = 1000) -> list[Any]:
        return []

    def retry(self, name: str, position: int) -> Any:
        return "absent"
