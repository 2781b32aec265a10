"""Identifiers given to ``HostCustomFieldsColumn`` are spliced into SQL, so only plain
identifiers pass: anything that could quote, comment or chain a statement is refused
before any statement exists."""

from __future__ import annotations

import pytest

from infrastructure.bootstrap import load_projections
from infrastructure.runtime.settings import Settings
from projections.base import InvalidProjection, check_name
from projections.host_custom_fields import HostCustomFieldsColumn
from tests.support.host_tables import NAME


@pytest.mark.parametrize(
    "field",
    ["table", "id_column", "column", "tenant_column"],
)
@pytest.mark.parametrize(
    "hostile",
    ["contacts; DROP TABLE x", 'x"y', "a b", "1abc", "", "x" * 64, "t--", "ñ"],
)
def test_hostile_identifiers_are_refused(field: str, hostile: str) -> None:
    given = {
        "table": "contacts",
        "id_column": "id",
        "column": "custom_fields",
        "tenant_column": "tenant_id",
        field: hostile,
    }
    with pytest.raises(InvalidProjection, match=field):
        HostCustomFieldsColumn(entity_name="contact", **given)


@pytest.mark.parametrize("name", ["feed__next", "Host", "x;y", "", "a" * 64, "_x", "9x"])
def test_bad_projection_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidProjection):
        check_name(name)
    with pytest.raises(InvalidProjection):
        HostCustomFieldsColumn(
            table="contacts", id_column="id", column="cf", entity_name="contact", name=name
        )


def test_the_three_columns_must_differ() -> None:
    with pytest.raises(InvalidProjection, match="differ"):
        HostCustomFieldsColumn(table="t", id_column="id", column="id", entity_name="contact")


def test_plain_identifiers_pass_and_name_the_projection() -> None:
    made = HostCustomFieldsColumn(
        table="Contacts_2", id_column="ID", column="custom_fields", entity_name="contact"
    )
    assert (made.name, dict(made.tables)) == (
        "host_contacts_2_custom_fields",
        {"definitions": "host_contacts_2_custom_fields_definitions"},
    )


@pytest.mark.parametrize("spec", ["no_colon", ":attr", "module:", "no_such_module_x:f"])
def test_a_host_projection_setting_that_names_nothing_is_a_configuration_error(
    spec: str,
) -> None:
    with pytest.raises(ValueError, match="host projection"):
        load_projections([spec])


def test_a_host_projection_setting_names_a_factory_or_an_object() -> None:
    (made,) = load_projections(["tests.support.host_tables:contacts_column"])
    assert isinstance(made, HostCustomFieldsColumn) and made.name == NAME
    assert Settings(host_projections=" a:b , c:d ,").host_projections == ("a:b", "c:d")
