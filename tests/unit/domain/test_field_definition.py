"""FieldDefinition and FieldCatalog, given events / when command / then events."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from domain.field_definition import (
    CapExceeded,
    DefinitionAlreadyActive,
    DefinitionNotActive,
    FieldCatalog,
    FieldDefinition,
    FieldDefinitionDefined,
    FieldDefinitionDeleted,
    FieldDefinitionUpdated,
    FieldSettings,
    FieldSlotClaimed,
    FieldSlotReleased,
    FieldTypeImmutable,
    catalog_id,
    definition_id,
)
from domain.field_types import check_field_spec
from tests.unit.domain.scenario import NOW, given, history, shape, when

Command = Callable[[FieldDefinition], object]
CatalogCommand = Callable[[FieldCatalog], object]

STREAM = definition_id("t1", "contact", "tier")
REF = {"tenant_id": "t1", "entity_name": "contact", "field_key": "tier"}


def settings(field_type: str = "text", **options: object) -> FieldSettings:
    return FieldSettings(
        spec=check_field_spec(field_type, options),
        write_roles=None,
        required=False,
        searchable=False,
        display_order=0,
        label="Tier",
    )


def define(field_type: str = "text", **options: object) -> Command:
    return lambda d: d.define(
        **REF, scope="tenant", settings=settings(field_type, **options), now=NOW
    )


def update(field_type: str = "text", **options: object) -> Command:
    return lambda d: d.update(**REF, settings=settings(field_type, **options), now=NOW)


def delete() -> Command:
    return lambda d: d.delete(**REF, now=NOW)


def test_define_a_new_definition() -> None:
    definition = given(FieldDefinition, STREAM)
    events = when(definition, define("text", maxLength=5))
    assert [shape(e) for e in events] == [
        (
            "FieldDefinitionDefined",
            1,
            {
                **REF,
                "scope": "tenant",
                "generation": 1,
                "field": {"type": "text", "maxLength": 5},
                "field_access": None,
                "required": False,
                "searchable": False,
                "display_order": 0,
                "label": "Tier",
                "retention": None,
            },
        )
    ]
    assert events[0].originator_id == STREAM and events[0].timestamp == NOW
    assert definition.active and definition.generation == 1 and definition.version == 1


def test_define_an_active_definition_is_refused() -> None:
    definition = given(FieldDefinition, STREAM, history(FieldDefinition, STREAM, define()))
    with pytest.raises(DefinitionAlreadyActive):
        definition.define(**REF, scope="tenant", settings=settings(), now=NOW)
    assert definition.collect() == []


def test_update_keeps_the_generation_and_changes_the_settings() -> None:
    definition = given(FieldDefinition, STREAM, history(FieldDefinition, STREAM, define()))
    events = when(definition, update("text", maxLength=9))
    assert [type(e) for e in events] == [FieldDefinitionUpdated]
    assert events[0].originator_version == 2
    assert events[0].payload()["generation"] == 1
    assert definition.spec.options == {"maxLength": 9}


def test_update_cannot_change_the_type() -> None:
    definition = given(FieldDefinition, STREAM, history(FieldDefinition, STREAM, define("text")))
    with pytest.raises(FieldTypeImmutable) as caught:
        definition.update(**REF, settings=settings("number"), now=NOW)
    assert (caught.value.current, caught.value.requested) == ("text", "number")
    assert definition.collect() == []


@pytest.mark.parametrize("past", [(), (define(), delete())], ids=["never defined", "deleted"])
def test_update_and_delete_need_an_active_definition(past: tuple[Command, ...]) -> None:
    definition = given(FieldDefinition, STREAM, history(FieldDefinition, STREAM, *past))
    with pytest.raises(DefinitionNotActive):
        definition.update(**REF, settings=settings(), now=NOW)
    with pytest.raises(DefinitionNotActive):
        definition.delete(**REF, now=NOW)
    assert definition.collect() == []


def test_delete_records_scope_and_generation() -> None:
    definition = given(FieldDefinition, STREAM, history(FieldDefinition, STREAM, define()))
    events = when(definition, delete())
    assert [shape(e) for e in events] == [
        ("FieldDefinitionDeleted", 2, {**REF, "scope": "tenant", "generation": 1})
    ]
    assert not definition.active


def test_redefine_after_delete_continues_the_stream_with_a_new_generation_and_any_type() -> None:
    past = history(FieldDefinition, STREAM, define("text"), update("text"), delete())
    definition = given(FieldDefinition, STREAM, past)
    events = when(definition, define("number", min=0))
    assert [type(e) for e in events] == [FieldDefinitionDefined]
    assert events[0].originator_version == 4
    assert events[0].payload()["generation"] == 2
    assert definition.spec.type == "number"
    # and once more: every define raises the generation
    events = when(definition, delete()) + when(definition, define("boolean"))
    assert [(type(e), e.payload()["generation"]) for e in events] == [
        (FieldDefinitionDeleted, 2),
        (FieldDefinitionDefined, 3),
    ]


def test_system_scope_is_remembered_for_the_delete() -> None:
    stream = definition_id("system", "contact", "tier")
    ref = {**REF, "tenant_id": "system"}
    past = history(
        FieldDefinition,
        stream,
        lambda d: d.define(**ref, scope="system", settings=settings(), now=NOW),
    )
    events = when(given(FieldDefinition, stream, past), lambda d: d.delete(**ref, now=NOW))
    assert [(type(e), e.payload()["scope"]) for e in events] == [(FieldDefinitionDeleted, "system")]


def test_field_access_roles_are_recorded_and_replayed() -> None:
    restricted = FieldSettings(
        spec=check_field_spec("text", {}),
        write_roles=("TenantAdmin",),
        required=True,
        searchable=True,
        display_order=3,
        label="L",
    )
    events = history(
        FieldDefinition,
        STREAM,
        lambda d: d.define(**REF, scope="tenant", settings=restricted, now=NOW),
    )
    assert events[0].payload()["field_access"] == {"write": ["TenantAdmin"]}
    assert given(FieldDefinition, STREAM, events).settings == restricted


def test_spec_of_a_never_defined_definition_is_an_error() -> None:
    with pytest.raises(DefinitionNotActive):
        _ = given(FieldDefinition, STREAM).spec


# --- the per-tenant catalog (the cap) ---------------------------------------------

CATALOG = catalog_id("t1")


def claim(key: str, limit: int | None = None) -> CatalogCommand:
    return lambda c: c.claim(
        tenant_id="t1", entity_name="contact", field_key=key, limit=limit, now=NOW
    )


def release(key: str) -> CatalogCommand:
    return lambda c: c.release(tenant_id="t1", entity_name="contact", field_key=key, now=NOW)


def test_claim_under_the_cap() -> None:
    catalog = given(FieldCatalog, CATALOG, history(FieldCatalog, CATALOG, claim("a")))
    events = when(catalog, claim("b", limit=2))
    assert [shape(e) for e in events] == [
        ("FieldSlotClaimed", 2, {"tenant_id": "t1", "entity_name": "contact", "field_key": "b"})
    ]
    assert catalog.active == {("contact", "a"), ("contact", "b")}


def test_claim_at_the_cap_is_refused_with_limit_and_current() -> None:
    catalog = given(FieldCatalog, CATALOG, history(FieldCatalog, CATALOG, claim("a"), claim("b")))
    with pytest.raises(CapExceeded) as caught:
        catalog.claim(tenant_id="t1", entity_name="contact", field_key="c", limit=2, now=NOW)
    assert (caught.value.limit, caught.value.current) == (2, 2)
    assert catalog.collect() == []


def test_released_slots_do_not_count() -> None:
    past = history(FieldCatalog, CATALOG, claim("a"), claim("b"), release("a"))
    catalog = given(FieldCatalog, CATALOG, past)
    events = when(catalog, claim("c", limit=2))
    assert [type(e) for e in events] == [FieldSlotClaimed]
    assert catalog.active == {("contact", "b"), ("contact", "c")}


def test_no_limit_means_no_cap_and_zero_means_none_allowed() -> None:
    catalog = given(
        FieldCatalog, CATALOG, history(FieldCatalog, CATALOG, *[claim(f"k{i}") for i in range(50)])
    )
    assert len(when(catalog, claim("more", limit=None))) == 1
    with pytest.raises(CapExceeded):
        given(FieldCatalog, CATALOG).claim(
            tenant_id="t1", entity_name="contact", field_key="x", limit=0, now=NOW
        )


def test_release_emits_a_slot_released() -> None:
    catalog = given(FieldCatalog, CATALOG, history(FieldCatalog, CATALOG, claim("a")))
    assert [type(e) for e in when(catalog, release("a"))] == [FieldSlotReleased]
    assert catalog.active == set()
