"""Custom-field write handlers and queries on fakes: access, errors, and the events
each write appends (or does not)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from application import SYSTEM_TENANT_ID, Result, User
from application.app import App
from application.context import Context, Policy
from application.paging import encode_cursor
from domain.custom_field_values import CustomFieldValueCleared, CustomFieldValueSet
from domain.events import DomainEvent
from domain.field_definition import (
    FieldDefinitionDefined,
    FieldDefinitionDeleted,
    FieldDefinitionUpdated,
    FieldSlotClaimed,
    FieldSlotReleased,
    definition_id,
)
from tests.support.results import failed
from tests.unit.application.fakes import (
    FakeCipher,
    FakeEventStore,
    FakeProjections,
    FakeReadModel,
    FixedClock,
)

T1, T2 = "t-one", "t-two"
ADMIN = User("a1", T1, frozenset({"TenantAdmin"}))
MEMBER = User("m1", T1, frozenset({"TenantMember"}))
NOBODY = User("n1", T1, frozenset())
OTHER_ADMIN = User("a2", T2, frozenset({"TenantAdmin"}))
OPERATOR = User("op", SYSTEM_TENANT_ID, frozenset({"SystemAdmin"}))
FIELD_MANAGER = User("fm", T1, frozenset({"FieldManager"}))


@dataclass
class Harness:
    policy: Policy = field(default_factory=Policy)
    project_inline: bool = False
    store: FakeEventStore = field(default_factory=FakeEventStore)
    read_model: FakeReadModel = field(default_factory=FakeReadModel)
    projections: FakeProjections = field(default_factory=FakeProjections)
    cipher: FakeCipher = field(default_factory=FakeCipher)

    def __post_init__(self) -> None:
        ctx = Context(
            store=self.store,
            clock=FixedClock(),
            custom_fields=self.read_model,
            policy=self.policy,
            keys=self.cipher,
        )
        self.app = App(ctx, self.projections, project_inline=self.project_inline)

    def write(self, name: str, payload: Any, user: User) -> Result:
        return self.app.write(name, payload, user)

    def ok(self, name: str, payload: Any, user: User) -> dict[str, Any]:
        result = self.write(name, payload, user)
        assert result.is_success, result.error
        assert result.data is not None
        return result.data

    def define(
        self, key: str = "tier", user: User = ADMIN, entity: str = "contact", **field_spec: Any
    ) -> Result:
        spec = field_spec or {"type": "text"}
        name = "define-system-field" if user is OPERATOR else "define-tenant-field"
        return self.write(name, {"entityName": entity, "fieldKey": key, "field": spec}, user)

    def set(
        self, value: Any, key: str = "tier", user: User = ADMIN, entity_id: str = "c1"
    ) -> Result:
        return self.write(
            "set-custom-field",
            {"entityName": "contact", "entityId": entity_id, "fieldKey": key, "value": value},
            user,
        )

    def clear(self, key: str = "tier", user: User = ADMIN, entity_id: str = "c1") -> Result:
        return self.write(
            "clear-custom-field",
            {"entityName": "contact", "entityId": entity_id, "fieldKey": key},
            user,
        )


E = TypeVar("E", bound=DomainEvent)


def event_at(h: Harness, index: int, cls: type[E]) -> E:
    """The store's event at ``index``, checked to be a ``cls``."""
    event = h.store.events[index]
    assert isinstance(event, cls), event
    return event


@pytest.fixture
def h() -> Harness:
    return Harness()


REF = {"entityName": "contact", "fieldKey": "tier"}
REF_C1 = {**REF, "entityId": "c1"}


# --- define-tenant-field ------------------------------------------------------------


def test_define_appends_definition_and_catalog_slot_in_one_atomic_write(h: Harness) -> None:
    data = h.ok("define-tenant-field", {**REF, "field": {"type": "text"}}, ADMIN)
    assert data == {**REF, "scope": "tenant", "generation": 1}
    assert [[type(e) for e in batch] for batch in h.store.appends] == [
        [FieldDefinitionDefined, FieldSlotClaimed]
    ]


def test_define_records_the_whole_payload(h: Harness) -> None:
    h.ok(
        "define-tenant-field",
        {
            **REF,
            "field": {
                "type": "enum",
                "options": ["gold", "silver"],
                "fieldAccess": {"write": ["TenantAdmin"]},
            },
            "required": True,
            "searchable": True,
            "displayOrder": 7,
            "label": "Tier",
            "retention": {"keepFor": "18m", "action": "anonymize"},
        },
        ADMIN,
    )
    defined = h.store.events[0]
    assert isinstance(defined, FieldDefinitionDefined)
    assert defined.payload() == {
        "tenant_id": T1,
        "entity_name": "contact",
        "field_key": "tier",
        "scope": "tenant",
        "generation": 1,
        "field": {"type": "enum", "options": ["gold", "silver"]},
        "field_access": {"write": ["TenantAdmin"]},
        "required": True,
        "searchable": True,
        "display_order": 7,
        "label": "Tier",
        "retention": {"keepFor": "18m", "action": "anonymize"},
    }
    assert defined.originator_id == definition_id(T1, "contact", "tier")


def test_define_label_defaults_to_the_key(h: Harness) -> None:
    h.ok("define-tenant-field", {**REF, "field": {"type": "text"}}, ADMIN)
    assert event_at(h, 0, FieldDefinitionDefined).label == "tier"


def test_define_an_active_key_again_is_409(h: Harness) -> None:
    assert h.define().is_success
    failed(h.define(type="number"), "version_conflict", 409)
    assert len(h.store.appends) == 1


def test_define_a_key_the_system_defines_is_422_field_key_reserved(h: Harness) -> None:
    assert h.define(user=OPERATOR).is_success
    details = failed(h.define(), "field_key_reserved", 422)
    assert details == {"entityName": "contact", "fieldKey": "tier"}
    # another entity's key of the same name is free
    assert h.define(entity="deal").is_success


@pytest.mark.parametrize("roles", [{"SystemAdmin"}, {"TenantAdmin"}])
def test_system_tenant_callers_cannot_write_tenant_fields(h: Harness, roles: set[str]) -> None:
    user = User("s", SYSTEM_TENANT_ID, frozenset(roles))
    for name, payload in [
        ("define-tenant-field", {**REF, "field": {"type": "text"}}),
        ("update-tenant-field", {**REF, "field": {"type": "text"}}),
        ("delete-tenant-field", REF),
    ]:
        failed(h.write(name, payload, user), "system_tenant_not_allowed", 422)
    assert h.store.appends == []


@pytest.mark.parametrize(
    "user", [MEMBER, NOBODY, FIELD_MANAGER], ids=["member", "no role", "custom role"]
)
def test_definition_writes_need_a_definition_role(h: Harness, user: User) -> None:
    assert h.define().is_success
    failed(h.define("other", user=user), "forbidden", 403)
    failed(
        h.write("update-tenant-field", {**REF, "field": {"type": "text"}}, user), "forbidden", 403
    )
    failed(h.write("delete-tenant-field", REF, user), "forbidden", 403)


def test_a_configured_role_set_replaces_the_default() -> None:
    h = Harness(policy=Policy(field_definition_write_roles=frozenset({"FieldManager"})))
    failed(h.define(user=ADMIN), "forbidden", 403)
    assert h.define(user=FIELD_MANAGER).is_success
    assert h.write(
        "update-tenant-field", {**REF, "field": {"type": "text"}, "label": "T"}, FIELD_MANAGER
    ).is_success
    failed(h.write("delete-tenant-field", REF, ADMIN), "forbidden", 403)
    assert h.write("delete-tenant-field", REF, FIELD_MANAGER).is_success
    # a custom role configured to write may also read
    h.read_model.definitions.append({"tenantId": T1, "entityName": "contact", "fieldKey": "x"})
    listed = h.app.query("list-field-definitions", {}, FIELD_MANAGER)
    assert listed.is_success and listed.data is not None
    assert [d["fieldKey"] for d in listed.data["items"]] == ["x"]


def test_field_access_accepts_custom_role_names(h: Harness) -> None:
    assert h.define(type="text", fieldAccess={"write": ["Editor", "TenantAdmin"]}).is_success
    defined = event_at(h, 0, FieldDefinitionDefined)
    assert defined.field_access == {"write": ["Editor", "TenantAdmin"]}


@pytest.mark.parametrize(
    ("field_spec", "path"),
    [
        ({}, "field.type"),
        ({"type": 3}, "field.type"),
        ({"type": "colour"}, "field"),
        ({"type": "enum", "options": []}, "field"),
        ({"type": "text", "maxLength": 0}, "field"),
        ({"type": "text", "fieldAccess": {"write": []}}, "field.fieldAccess"),
        ({"type": "text", "fieldAccess": {"read": ["TenantAdmin"]}}, "field.fieldAccess"),
        ({"type": "text", "fieldAccess": ["TenantAdmin"]}, "field.fieldAccess"),
        ({"type": "text", "fieldAccess": {"write": [""]}}, "field.fieldAccess"),
        ({"type": "text", "maxLength": 3, "max_length": 3}, "field"),
    ],
)
def test_invalid_field_specs_are_400_with_the_offending_path(
    h: Harness, field_spec: dict[str, Any], path: str
) -> None:
    result = h.write("define-tenant-field", {**REF, "field": field_spec}, ADMIN)
    details = failed(result, "invalid_payload", 400)
    assert path in [error["path"] for error in details["errors"]], details
    assert h.store.appends == []


def test_field_options_are_accepted_in_snake_case_too(h: Harness) -> None:
    assert h.define(type="text", max_length=5, field_access={"write": ["TenantAdmin"]}).is_success
    defined = event_at(h, 0, FieldDefinitionDefined)
    assert defined.field == {"type": "text", "maxLength": 5}
    assert defined.field_access == {"write": ["TenantAdmin"]}


# --- the cap --------------------------------------------------------------------------


def test_cap_exceeded_details_and_no_event() -> None:
    h = Harness(policy=Policy(field_definition_limit_per_tenant=2))
    assert h.define("a").is_success
    assert h.define("b", entity="deal").is_success  # counted across entities
    before = len(h.store.events)
    details = failed(h.define("c"), "cap_exceeded", 422)
    assert details == {"capName": "fieldDefinitionsPerTenant", "limit": 2, "current": 2}
    assert len(h.store.events) == before


def test_cap_excludes_deleted_definitions_and_system_fields() -> None:
    h = Harness(policy=Policy(field_definition_limit_per_tenant=2))
    for key in ("s1", "s2", "s3"):
        assert h.define(key, user=OPERATOR).is_success
    assert h.define("a").is_success
    assert h.define("b").is_success
    assert h.write(
        "delete-tenant-field", {"entityName": "contact", "fieldKey": "a"}, ADMIN
    ).is_success
    assert h.define("c").is_success
    failed(h.define("d"), "cap_exceeded", 422)
    # re-defining the deleted key needs a slot again
    failed(h.define("a"), "cap_exceeded", 422)


def test_the_cap_is_per_tenant() -> None:
    h = Harness(policy=Policy(field_definition_limit_per_tenant=1))
    assert h.define("a").is_success
    assert h.define("a", user=OTHER_ADMIN).is_success
    failed(h.define("b", user=OTHER_ADMIN), "cap_exceeded", 422)


def test_a_cap_of_zero_allows_no_tenant_field() -> None:
    h = Harness(policy=Policy(field_definition_limit_per_tenant=0))
    assert failed(h.define(), "cap_exceeded", 422)["current"] == 0


# --- update-tenant-field ------------------------------------------------------------


def test_update_missing_deleted_or_foreign_is_404(h: Harness) -> None:
    update = {**REF, "field": {"type": "text"}}
    failed(h.write("update-tenant-field", update, ADMIN), "not_found", 404)
    assert h.define(user=OTHER_ADMIN).is_success
    failed(h.write("update-tenant-field", update, ADMIN), "not_found", 404)
    assert h.define().is_success
    assert h.write("delete-tenant-field", REF, ADMIN).is_success
    failed(h.write("update-tenant-field", update, ADMIN), "not_found", 404)


def test_update_a_system_field_as_a_tenant_is_404(h: Harness) -> None:
    assert h.define(user=OPERATOR).is_success
    failed(
        h.write("update-tenant-field", {**REF, "field": {"type": "text"}}, ADMIN), "not_found", 404
    )


def test_update_cannot_change_the_type(h: Harness) -> None:
    assert h.define(type="text").is_success
    details = failed(
        h.write("update-tenant-field", {**REF, "field": {"type": "number"}}, ADMIN),
        "field_type_immutable",
        422,
    )
    assert details == {
        "entityName": "contact",
        "fieldKey": "tier",
        "currentType": "text",
        "requestedType": "number",
    }
    assert len(h.store.appends) == 1


def test_update_last_write_wins(h: Harness) -> None:
    assert h.define(type="text").is_success
    for label in ("first", "second"):
        data = h.ok(
            "update-tenant-field",
            {**REF, "field": {"type": "text", "maxLength": len(label)}, "label": label},
            ADMIN,
        )
        assert data == {**REF, "scope": "tenant", "generation": 1}
    updates = [e for e in h.store.events if isinstance(e, FieldDefinitionUpdated)]
    assert [(u.label, u.field) for u in updates] == [
        ("first", {"type": "text", "maxLength": 5}),
        ("second", {"type": "text", "maxLength": 6}),
    ]
    # the latest settings are what a value is validated against
    failed(h.set("toolong!"), "custom_field_value_invalid", 422)
    assert h.set("fits").is_success


# --- delete -----------------------------------------------------------------------------


def test_delete_emits_deleted_and_releases_the_slot(h: Harness) -> None:
    assert h.define().is_success
    data = h.ok("delete-tenant-field", REF, ADMIN)
    assert data == {**REF, "scope": "tenant", "generation": 1}
    deleted, released = h.store.appends[-1]
    assert isinstance(deleted, FieldDefinitionDeleted) and isinstance(released, FieldSlotReleased)
    assert deleted.payload() == {
        "tenant_id": T1,
        "entity_name": "contact",
        "field_key": "tier",
        "scope": "tenant",
        "generation": 1,
    }


def test_delete_missing_or_already_deleted_is_404(h: Harness) -> None:
    failed(h.write("delete-tenant-field", REF, ADMIN), "not_found", 404)
    assert h.define().is_success
    assert h.write("delete-tenant-field", REF, ADMIN).is_success
    failed(h.write("delete-tenant-field", REF, ADMIN), "not_found", 404)
    failed(h.write("delete-tenant-field", REF, OTHER_ADMIN), "not_found", 404)


def test_redefine_after_delete_starts_a_new_generation_with_any_type(h: Harness) -> None:
    assert h.define(type="text").is_success
    assert h.write("delete-tenant-field", REF, ADMIN).is_success
    data = h.ok("define-tenant-field", {**REF, "field": {"type": "boolean"}}, ADMIN)
    assert data["generation"] == 2
    assert h.set(True).is_success
    value_set = h.store.events[-1]
    assert isinstance(value_set, CustomFieldValueSet) and value_set.generation == 2


# --- system fields ----------------------------------------------------------------


@pytest.mark.parametrize("user", [ADMIN, MEMBER, NOBODY], ids=["admin", "member", "no role"])
def test_system_field_writes_need_system_admin(h: Harness, user: User) -> None:
    failed(
        h.write("define-system-field", {**REF, "field": {"type": "text"}}, user), "forbidden", 403
    )
    failed(h.write("delete-system-field", REF, user), "forbidden", 403)


def test_system_define_and_delete_touch_no_catalog(h: Harness) -> None:
    assert h.ok("define-system-field", {**REF, "field": {"type": "text"}}, OPERATOR) == {
        **REF,
        "scope": "system",
        "generation": 1,
    }
    assert h.ok("delete-system-field", REF, OPERATOR)["scope"] == "system"
    assert [[type(e) for e in batch] for batch in h.store.appends] == [
        [FieldDefinitionDefined],
        [FieldDefinitionDeleted],
    ]
    assert event_at(h, -1, FieldDefinitionDeleted).scope == "system"
    failed(h.write("delete-system-field", REF, OPERATOR), "not_found", 404)


# --- set-custom-field / clear-custom-field ------------------------------------------


def test_set_records_the_canonical_value_with_definition_and_generation(h: Harness) -> None:
    assert h.define(type="money", currency="EUR").is_success
    data = h.ok(
        "set-custom-field",
        {
            "entityName": "contact",
            "entityId": "c1",
            "fieldKey": "tier",
            "value": {"amount": 12.5, "currency": "EUR"},
        },
        MEMBER,
    )
    assert data["value"] == {"amount": "12.5", "currency": "EUR"}
    value_set = h.store.events[-1]
    assert isinstance(value_set, CustomFieldValueSet)
    assert value_set.definition_id == str(definition_id(T1, "contact", "tier"))
    assert value_set.generation == 1
    purpose = '["field", "contact", "c1", "tier"]'
    opened = h.cipher.reveal(value_set.sealed, T1, None, purpose)
    assert opened == '{"amount":"12.5","currency":"EUR"}'
    assert "12.5" not in value_set.digest


def test_set_and_clear_without_an_active_definition_are_404(h: Harness) -> None:
    failed(h.set("x"), "not_found", 404)
    failed(h.clear(), "not_found", 404)
    assert h.define(user=OTHER_ADMIN).is_success  # another tenant's definition
    failed(h.set("x"), "not_found", 404)
    failed(h.clear(), "not_found", 404)
    assert not any(isinstance(e, CustomFieldValueSet) for e in h.store.events)


def test_invalid_value_is_422_with_issues_and_appends_nothing(h: Harness) -> None:
    assert h.define(type="number", min=0).is_success
    before = len(h.store.events)
    for value, issue in [("42", "expected a number"), (-1, "less than min 0")]:
        details = failed(h.set(value), "custom_field_value_invalid", 422)
        assert details == {"fieldKey": "tier", "fieldType": "number", "issues": [issue]}
    assert len(h.store.events) == before


def test_field_access_denied_lists_the_required_roles(h: Harness) -> None:
    assert h.define(type="text", fieldAccess={"write": ["TenantAdmin"]}).is_success
    assert h.set("by admin").is_success
    details = failed(h.set("by member", user=MEMBER), "field_access_denied", 422)
    assert details == {"requiredRoles": ["TenantAdmin"]}
    failed(h.clear(user=MEMBER), "field_access_denied", 422)
    assert h.clear(user=ADMIN).is_success


def test_value_writes_need_a_value_role(h: Harness) -> None:
    assert h.define().is_success
    failed(h.set("x", user=NOBODY), "forbidden", 403)
    failed(h.clear(user=NOBODY), "forbidden", 403)


def test_configured_value_roles_replace_the_default() -> None:
    h = Harness(policy=Policy(value_write_roles=frozenset({"Editor"})))
    assert h.define().is_success
    failed(h.set("x", user=MEMBER), "forbidden", 403)
    failed(h.set("x", user=ADMIN), "forbidden", 403)
    assert h.set("x", user=User("e", T1, frozenset({"Editor"}))).is_success


def test_values_of_a_system_field_are_set_in_the_callers_tenant(h: Harness) -> None:
    assert h.define(user=OPERATOR).is_success
    assert h.set("a", user=MEMBER).is_success
    assert h.set("b", user=OTHER_ADMIN).is_success
    sets = [e for e in h.store.events if isinstance(e, CustomFieldValueSet)]
    assert {(e.tenant_id, e.definition_id) for e in sets} == {
        (T1, str(definition_id(SYSTEM_TENANT_ID, "contact", "tier"))),
        (T2, str(definition_id(SYSTEM_TENANT_ID, "contact", "tier"))),
    }


def test_a_tenants_own_definition_shadows_a_later_system_one(h: Harness) -> None:
    assert h.define(type="text").is_success
    assert h.define(user=OPERATOR, type="number").is_success
    assert h.set("text still").is_success
    value_set = event_at(h, -1, CustomFieldValueSet)
    assert value_set.definition_id == str(definition_id(T1, "contact", "tier"))


def test_clear_reports_whether_there_was_a_value(h: Harness) -> None:
    assert h.define().is_success
    first = h.ok(
        "clear-custom-field", {"entityName": "contact", "entityId": "c1", "fieldKey": "tier"}, ADMIN
    )
    assert first["cleared"] is False
    assert not any(isinstance(e, CustomFieldValueCleared) for e in h.store.events)
    assert h.set("x").is_success
    assert (
        h.ok(
            "clear-custom-field",
            {"entityName": "contact", "entityId": "c1", "fieldKey": "tier"},
            ADMIN,
        )["cleared"]
        is True
    )
    assert isinstance(h.store.events[-1], CustomFieldValueCleared)


def test_clear_of_a_value_from_before_a_redefine_emits_nothing(h: Harness) -> None:
    assert h.define().is_success
    assert h.set("old").is_success
    assert h.write("delete-tenant-field", REF, ADMIN).is_success
    assert h.define().is_success
    before = len(h.store.events)
    assert (
        h.ok(
            "clear-custom-field",
            {"entityName": "contact", "entityId": "c1", "fieldKey": "tier"},
            ADMIN,
        )["cleared"]
        is False
    )
    assert len(h.store.events) == before


# --- dispatch, retries, availability --------------------------------------------------


def test_unknown_handler_and_query_are_failed_results_not_exceptions(h: Harness) -> None:
    details = failed(h.write("define-everything", {}, ADMIN), "unknown_handler", 404)
    assert "define-tenant-field" in details["known"]
    details = failed(h.app.query("get-everything", {}, ADMIN), "unknown_handler", 404)
    assert "get-entity" in details["known"]
    # a write name is not a query and vice versa
    failed(h.app.query("define-tenant-field", {}, ADMIN), "unknown_handler", 404)
    failed(h.write("get-entity", {}, ADMIN), "unknown_handler", 404)


def test_a_caller_that_is_not_a_user_is_400(h: Harness) -> None:
    not_a_user: Any = {"id": "u", "tenant_id": T1, "roles": ["TenantAdmin"]}
    failed(
        h.app.write("define-tenant-field", {**REF, "field": {"type": "text"}}, not_a_user),
        "invalid_user",
        400,
    )


def test_a_lost_race_is_retried_on_fresh_state(h: Harness) -> None:
    assert h.define().is_success
    h.store.conflicts_to_raise = 2
    assert h.set("x").is_success
    assert isinstance(h.store.events[-1], CustomFieldValueSet)


def test_a_race_lost_every_time_is_409(h: Harness) -> None:
    assert h.define().is_success
    h.store.conflicts_to_raise = 100
    failed(h.set("x"), "version_conflict", 409)


def test_store_unavailable_is_503(h: Harness) -> None:
    h.store.unavailable = True
    failed(h.define(), "unavailable", 503)
    failed(h.set("x"), "unavailable", 503)


def test_a_committed_write_stays_a_success_when_the_inline_projection_cannot_run() -> None:
    h = Harness(project_inline=True)
    h.projections.unavailable = True
    assert h.define().is_success  # no exception, no 503: the events are stored
    assert [type(e) for e in h.store.events] == [FieldDefinitionDefined, FieldSlotClaimed]


def test_inline_projection_runs_after_successful_writes_only() -> None:
    h = Harness(project_inline=True)
    assert h.define().is_success
    failed(h.define(), "version_conflict", 409)
    assert h.projections.catch_ups == 1


# --- queries ----------------------------------------------------------------------------


QUERIES = [
    ("list-field-definitions", {}),
    ("get-entity", {"entityName": "contact", "entityId": "c1"}),
    ("list-entities", {"entityName": "contact"}),
]


@pytest.mark.parametrize(("name", "payload"), QUERIES, ids=[q[0] for q in QUERIES])
def test_queries_need_a_role(h: Harness, name: str, payload: dict[str, Any]) -> None:
    failed(h.app.query(name, payload, NOBODY), "forbidden", 403)
    assert h.read_model.calls == []


@pytest.mark.parametrize(("name", "payload"), QUERIES, ids=[q[0] for q in QUERIES])
def test_queries_read_the_callers_tenant_only(
    h: Harness, name: str, payload: dict[str, Any]
) -> None:
    h.app.query(name, payload, OTHER_ADMIN)
    assert [call[1] for call in h.read_model.calls] == [T2]


def test_list_field_definitions(h: Harness) -> None:
    h.read_model.definitions += [
        {"tenantId": T1, "entityName": "contact", "fieldKey": "a", "scope": "tenant"},
        {"tenantId": "system", "entityName": "deal", "fieldKey": "b", "scope": "system"},
        {"tenantId": T2, "entityName": "contact", "fieldKey": "c", "scope": "tenant"},
    ]
    listed = h.app.query("list-field-definitions", {}, MEMBER)
    assert listed.data == {
        "items": [
            {"entityName": "contact", "fieldKey": "a", "scope": "tenant"},
            {"entityName": "deal", "fieldKey": "b", "scope": "system"},
        ],
        "nextCursor": None,
    }
    only_deal = h.app.query("list-field-definitions", {"entityName": "deal"}, MEMBER)
    assert only_deal.data is not None
    assert [d["fieldKey"] for d in only_deal.data["items"]] == ["b"]


def test_get_entity(h: Harness) -> None:
    failed(
        h.app.query("get-entity", {"entityName": "contact", "entityId": "c1"}, MEMBER),
        "not_found",
        404,
    )
    h.read_model.entities[T1, "contact"]["c1"] = {"tier": "gold"}
    got = h.app.query("get-entity", {"entityName": "contact", "entityId": "c1"}, MEMBER)
    assert got.data == {"entityName": "contact", "entityId": "c1", "customFields": {"tier": "gold"}}
    failed(
        h.app.query("get-entity", {"entityName": "contact", "entityId": "c1"}, OTHER_ADMIN),
        "not_found",
        404,
    )


def test_list_entities_pages_with_an_opaque_cursor(h: Harness) -> None:
    for i in range(5):
        h.read_model.entities[T1, "contact"][f"c{i}"] = {"n": i}
    seen: list[str] = []
    cursor = None
    while True:
        payload: dict[str, Any] = {"entityName": "contact", "limit": 2}
        if cursor:
            payload["cursor"] = cursor
        page = h.app.query("list-entities", payload, MEMBER)
        assert page.data is not None
        seen += [item["entityId"] for item in page.data["items"]]
        cursor = page.data["nextCursor"]
        if cursor is None:
            break
        assert len(page.data["items"]) == 2
    assert seen == [f"c{i}" for i in range(5)]
    # the read model was asked for one more than the limit, to know whether more follow
    assert {call[4] for call in h.read_model.calls if call[0] == "list_entities"} == {3}


def test_list_entities_with_exactly_limit_items_has_no_next_cursor(h: Harness) -> None:
    for i in range(2):
        h.read_model.entities[T1, "contact"][f"c{i}"] = {}
    page = h.app.query("list-entities", {"entityName": "contact", "limit": 2}, MEMBER)
    assert page.data is not None and page.data["nextCursor"] is None


@pytest.mark.parametrize(
    "cursor", ["!!!", "bm90IGpzb24", encode_cursor(["a", 1]), encode_cursor(5), ""]
)
def test_list_entities_refuses_foreign_cursors(h: Harness, cursor: str) -> None:
    details = failed(
        h.app.query("list-entities", {"entityName": "contact", "cursor": cursor}, MEMBER),
        "invalid_payload",
        400,
    )
    assert details["errors"][0]["path"] == "cursor"


@pytest.mark.parametrize("limit", [0, 501, "10", 2.5])
def test_list_entities_limit_bounds(h: Harness, limit: Any) -> None:
    failed(
        h.app.query("list-entities", {"entityName": "contact", "limit": limit}, MEMBER),
        "invalid_payload",
        400,
    )


def test_list_entities_where_needs_searchable_fields(h: Harness) -> None:
    h.read_model.definitions.append(
        {
            "tenantId": T1,
            "entityName": "contact",
            "fieldKey": "tier",
            "scope": "tenant",
            "field": {"type": "text"},
            "searchable": True,
        }
    )
    h.read_model.entities[T1, "contact"].update({"c1": {"tier": "gold"}, "c2": {"tier": "x"}})
    details = failed(
        h.app.query(
            "list-entities",
            {"entityName": "contact", "where": {"tier": "gold", "z": 1, "a": 2}},
            MEMBER,
        ),
        "field_not_searchable",
        422,
    )
    assert details == {"fieldKeys": ["a", "z"]}
    page = h.app.query(
        "list-entities", {"entityName": "contact", "where": {"tier": "gold"}}, MEMBER
    )
    assert page.data == {
        "items": [{"entityId": "c1", "customFields": {"tier": "gold"}}],
        "nextCursor": None,
    }


# --- sealed values and shred-tenant ---------------------------------------------------


def test_values_are_sealed_for_their_entity_and_key_and_filters_use_digests(h: Harness) -> None:
    h.define(type="text")
    h.ok("set-custom-field", {**REF_C1, "value": "gold"}, MEMBER)
    value_set = event_at(h, -1, CustomFieldValueSet)
    assert "gold" not in value_set.sealed and "gold" not in value_set.digest
    assert h.cipher.reveal(value_set.sealed, T1, None, '["field", "contact", "c1", "tier"]')
    assert not h.cipher.reveal(value_set.sealed, T1, None, '["field", "contact", "c2", "tier"]')
    # The read model holds the event's cell; queries open it and match its digest.
    h.read_model.entities[T1, "contact"]["c1"] = {
        "tier": {"s": value_set.sealed, "d": value_set.digest}
    }
    h.read_model.definitions.append(
        {
            "tenantId": T1,
            "entityName": "contact",
            "fieldKey": "tier",
            "scope": "tenant",
            "field": {"type": "text"},
            "searchable": True,
        }
    )
    got = h.app.query("get-entity", {"entityName": "contact", "entityId": "c1"}, MEMBER)
    assert got.data == {"entityName": "contact", "entityId": "c1", "customFields": {"tier": "gold"}}
    where = {"entityName": "contact", "where": {"tier": "gold"}}
    found = h.app.query("list-entities", where, MEMBER).data
    assert found is not None and [i["entityId"] for i in found["items"]] == ["c1"]
    # The same cell under another entity id opens nowhere.
    h.read_model.entities[T1, "contact"]["c2"] = h.read_model.entities[T1, "contact"]["c1"]
    moved = h.app.query("get-entity", {"entityName": "contact", "entityId": "c2"}, MEMBER)
    assert moved.data is not None and moved.data["customFields"] == {"tier": "[erased]"}

    # After shred-tenant: erased reads, no matches, writes 410; others unaffected.
    failed(h.write("shred-tenant", {"tenantId": T1}, ADMIN), "forbidden", 403)
    assert h.ok("shred-tenant", {"tenantId": T1}, OPERATOR) == {"tenantId": T1, "shredded": True}
    got = h.app.query("get-entity", {"entityName": "contact", "entityId": "c1"}, MEMBER)
    assert got.data is not None and got.data["customFields"] == {"tier": "[erased]"}
    found = h.app.query("list-entities", where, MEMBER).data
    assert found == {"items": [], "nextCursor": None}
    failed(h.write("set-custom-field", {**REF_C1, "value": "x"}, MEMBER), "erased", 410)
    assert h.cipher.shredded == {T1}


@pytest.mark.parametrize("payload", [{}, {"tenantId": ""}, {"tenantId": "t" * 201}, {"x": 1}])
def test_shred_tenant_payloads_are_validated(h: Harness, payload: dict[str, Any]) -> None:
    failed(h.write("shred-tenant", payload, OPERATOR), "invalid_payload", 400)
    assert h.cipher.shredded == set()


def test_shred_tenant_refuses_the_system_tenant_and_system_admins_elsewhere(h: Harness) -> None:
    payload = {"tenantId": SYSTEM_TENANT_ID}
    failed(h.write("shred-tenant", payload, OPERATOR), "system_tenant_not_allowed", 422)
    misplaced = User("op2", T2, frozenset({"SystemAdmin"}))
    failed(h.write("shred-tenant", {"tenantId": T1}, misplaced), "forbidden", 403)
    assert h.cipher.shredded == set()
