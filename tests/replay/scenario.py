"""The scripted scenario behind ``fixtures/custom_fields_scenario.jsonl``.

Run through the app on a fresh SQLite store with a stepping clock, then exported with
the CLI's own export code::

    python -m tests.replay.scenario tests/replay/fixtures/custom_fields_scenario.jsonl

A recorded fixture is history: regenerate it only on purpose (it then records the
*current* event shapes; old shapes belong in fixtures of their own).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from application import SYSTEM_TENANT_ID, User
from application.app import App
from infrastructure.bootstrap import bootstrap, event_store
from infrastructure.eventstore.jsonl import export_events


class SteppingClock:
    """Each reading is one second after the last: reproducible timestamps."""

    def __init__(self, start: datetime) -> None:
        self._next = start

    def now(self) -> datetime:
        now, self._next = self._next, self._next + timedelta(seconds=1)
        return now


ACME_ADMIN = User(id="ann", tenant_id="acme", roles=frozenset({"TenantAdmin"}))
ACME_MEMBER = User(id="bo", tenant_id="acme", roles=frozenset({"TenantMember"}))
GLOBEX_ADMIN = User(id="gus", tenant_id="globex", roles=frozenset({"TenantAdmin"}))
OPERATOR = User(id="ops", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))


def _value(entity: str, entity_id: str, key: str, value: Any) -> dict[str, Any]:
    return {"entityName": entity, "entityId": entity_id, "fieldKey": key, "value": value}


def _field(entity: str, key: str, field: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"entityName": entity, "fieldKey": key, "field": field, **extra}


SCRIPT: list[tuple[str, dict[str, Any], User]] = [
    # Two tenants define fields; the same key means different things in each.
    (
        "define-tenant-field",
        _field(
            "contact",
            "tier",
            {"type": "enum", "options": ["gold", "silver", "bronze"]},
            searchable=True,
            displayOrder=1,
            label="Tier",
        ),
        ACME_ADMIN,
    ),
    (
        "define-tenant-field",
        _field("contact", "score", {"type": "number", "min": 0, "max": 100}, displayOrder=2),
        ACME_ADMIN,
    ),
    (
        "define-tenant-field",
        _field("contact", "vip", {"type": "boolean", "fieldAccess": {"write": ["TenantAdmin"]}}),
        ACME_ADMIN,
    ),
    ("define-tenant-field", _field("contact", "birthday", {"type": "date"}), ACME_ADMIN),
    (
        "define-tenant-field",
        _field("contact", "tags", {"type": "multi_enum", "options": ["lead", "partner", "press"]}),
        ACME_ADMIN,
    ),
    (
        "define-tenant-field",
        _field("contact", "tier", {"type": "text", "maxLength": 30}, searchable=True),
        GLOBEX_ADMIN,
    ),
    (
        "define-tenant-field",
        _field("deal", "amount", {"type": "money", "currency": "EUR"}, searchable=True),
        GLOBEX_ADMIN,
    ),
    ("define-tenant-field", _field("deal", "site", {"type": "url"}), GLOBEX_ADMIN),
    # The operator defines a field on contact in every tenant.
    (
        "define-system-field",
        _field(
            "contact",
            "source",
            {"type": "enum", "options": ["web", "referral", "import"]},
            searchable=True,
        ),
        OPERATOR,
    ),
    ("set-custom-field", _value("contact", "c1", "tier", "gold"), ACME_MEMBER),
    ("set-custom-field", _value("contact", "c1", "score", 90), ACME_MEMBER),
    ("set-custom-field", _value("contact", "c1", "vip", True), ACME_ADMIN),
    ("set-custom-field", _value("contact", "c1", "source", "web"), ACME_MEMBER),
    ("set-custom-field", _value("contact", "c1", "birthday", "1985-07-01"), ACME_MEMBER),
    ("set-custom-field", _value("contact", "c2", "tier", "silver"), ACME_MEMBER),
    ("set-custom-field", _value("contact", "c2", "score", 40.5), ACME_MEMBER),
    ("set-custom-field", _value("contact", "c2", "source", "referral"), ACME_MEMBER),
    ("set-custom-field", _value("contact", "c2", "tags", ["lead", "press"]), ACME_MEMBER),
    ("set-custom-field", _value("contact", "c3", "tier", "gold"), ACME_MEMBER),
    ("set-custom-field", _value("contact", "c1", "tier", "Enterprise"), GLOBEX_ADMIN),
    ("set-custom-field", _value("contact", "c1", "source", "import"), GLOBEX_ADMIN),
    (
        "set-custom-field",
        _value("deal", "d1", "amount", {"amount": 1000.5, "currency": "EUR"}),
        GLOBEX_ADMIN,
    ),
    (
        "set-custom-field",
        _value("deal", "d1", "site", "https://globex.example/deals/1"),
        GLOBEX_ADMIN,
    ),
    (
        "set-custom-field",
        _value("deal", "d2", "amount", {"amount": "20", "currency": "EUR"}),
        GLOBEX_ADMIN,
    ),
    # Last write wins on update; a clear removes one value.
    (
        "update-tenant-field",
        _field(
            "contact",
            "score",
            {"type": "number", "min": 0, "max": 1000},
            displayOrder=0,
            label="Lead score",
        ),
        ACME_ADMIN,
    ),
    ("set-custom-field", _value("contact", "c3", "score", 700), ACME_MEMBER),
    (
        "clear-custom-field",
        {"entityName": "contact", "entityId": "c2", "fieldKey": "score"},
        ACME_MEMBER,
    ),
    # A tenant delete cascades in that tenant only; the re-define starts empty.
    ("delete-tenant-field", {"entityName": "contact", "fieldKey": "tier"}, ACME_ADMIN),
    (
        "define-tenant-field",
        _field("contact", "tier", {"type": "text"}, searchable=True, label="Tier (free)"),
        ACME_ADMIN,
    ),
    ("set-custom-field", _value("contact", "c3", "tier", "platinum"), ACME_MEMBER),
    # A system delete cascades in every tenant; its re-define starts empty too.
    ("delete-system-field", {"entityName": "contact", "fieldKey": "source"}, OPERATOR),
    ("define-system-field", _field("contact", "source", {"type": "text"}), OPERATOR),
    ("set-custom-field", _value("contact", "c1", "source", "partner-portal"), GLOBEX_ADMIN),
    # A deleted field that stays deleted.
    ("delete-tenant-field", {"entityName": "deal", "fieldKey": "amount"}, GLOBEX_ADMIN),
    # Another host entity.
    ("define-tenant-field", _field("mail-account", "signature", {"type": "text"}), ACME_ADMIN),
    ("set-custom-field", _value("mail-account", "acct-1", "signature", "Best, Ann"), ACME_ADMIN),
]


def run_scenario(app: App) -> None:
    for handler, payload, user in SCRIPT:
        result = app.write(handler, payload, user)
        if not result.is_success:
            raise RuntimeError(f"{handler} {payload}: {result.error}")


def record(output: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        app = bootstrap(
            database_url=f"sqlite:///{tmp}/scenario.db",
            blob_dir=Path(tmp) / "blobs",
            allow_private_hosts=True,
        )
        try:
            app.ctx = dataclasses.replace(
                app.ctx, clock=SteppingClock(datetime(2024, 1, 15, 9, 0, tzinfo=UTC))
            )
            run_scenario(app)
            with output.open("w", encoding="utf-8") as out:
                return export_events(event_store(app), out)
        finally:
            app.close()


if __name__ == "__main__":
    count = record(Path(sys.argv[1]))
    print(f"recorded {count} events")
