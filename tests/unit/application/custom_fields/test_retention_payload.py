"""``retention`` on define-tenant-field / update-tenant-field: validated at the boundary
(shape, action, keepFor's grammar and bounds), recorded in the definition's events."""

from __future__ import annotations

from typing import Any

import pytest

from domain.field_definition import FieldDefinitionDefined, FieldDefinitionUpdated
from tests.support.results import failed
from tests.unit.application.custom_fields.test_handlers import ADMIN, REF, Harness, event_at


@pytest.fixture
def h() -> Harness:
    return Harness()


@pytest.mark.parametrize(
    ("retention", "path"),
    [
        ({"keepFor": "29d", "action": "delete"}, "retention.keepFor"),
        ({"keepFor": "11y", "action": "delete"}, "retention.keepFor"),
        ({"keepFor": "30 days", "action": "delete"}, "retention.keepFor"),
        ({"keepFor": "9" * 10_000, "action": "delete"}, "retention.keepFor"),
        ({"keepFor": 30, "action": "delete"}, "retention.keepFor"),
        ({"keepFor": "30d", "action": "shred"}, "retention.action"),
        ({"keepFor": "30d"}, "retention.action"),
        ({"keepFor": "30d", "action": "delete", "then": "x"}, "retention.then"),
        ("30d", "retention"),
        ([], "retention"),
    ],
)
def test_a_bad_retention_is_400_with_its_path(h: Harness, retention: Any, path: str) -> None:
    payload = {**REF, "field": {"type": "text"}, "retention": retention}
    details = failed(h.write("define-tenant-field", payload, ADMIN), "invalid_payload", 400)
    assert path in [error["path"] for error in details["errors"]], details
    assert h.store.appends == []


def test_define_and_update_record_the_retention(h: Harness) -> None:
    payload = {
        **REF,
        "field": {"type": "text"},
        "retention": {"keepFor": "12w", "action": "delete"},
    }
    assert h.write("define-tenant-field", payload, ADMIN).is_success
    assert event_at(h, 0, FieldDefinitionDefined).retention == {
        "keepFor": "12w",
        "action": "delete",
    }
    payload["retention"] = {"keepFor": "10y", "action": "anonymize"}
    assert h.write("update-tenant-field", payload, ADMIN).is_success
    updated = [e for e in h.store.events if isinstance(e, FieldDefinitionUpdated)]
    assert updated[-1].retention == {"keepFor": "10y", "action": "anonymize"}
    del payload["retention"]
    assert h.write("update-tenant-field", payload, ADMIN).is_success
    updated = [e for e in h.store.events if isinstance(e, FieldDefinitionUpdated)]
    assert updated[-1].retention is None  # an update without it: kept for ever again
