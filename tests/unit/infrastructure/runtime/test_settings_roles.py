"""Role settings (docs/app-layer.md): any role name, a list or a comma-separated string; a
configured set replaces the default."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from infrastructure.runtime.settings import Settings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TIDINGS_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = Settings()
    assert settings.field_definition_write_roles == {"TenantAdmin"}
    assert settings.value_write_roles == {"TenantAdmin", "TenantMember"}
    assert settings.field_definition_limit_per_tenant is None


def test_a_custom_role_replaces_the_default() -> None:
    settings = Settings(field_definition_write_roles="FieldManager")
    assert settings.field_definition_write_roles == {"FieldManager"}


def test_comma_separated_and_list_forms() -> None:
    assert Settings(value_write_roles=" TenantAdmin, Editor ,").value_write_roles == {
        "TenantAdmin",
        "Editor",
    }
    assert Settings(value_write_roles=["Editor", "Editor"]).value_write_roles == {"Editor"}


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDINGS_FIELD_DEFINITION_WRITE_ROLES", "FieldManager,TenantAdmin")
    monkeypatch.setenv("TIDINGS_FIELD_DEFINITION_LIMIT_PER_TENANT", "3")
    settings = Settings()
    assert settings.field_definition_write_roles == {"FieldManager", "TenantAdmin"}
    assert settings.field_definition_limit_per_tenant == 3


@pytest.mark.parametrize("roles", ["", " , ", [], [""], [" Admin"], [3]])
def test_empty_or_malformed_role_sets_are_refused(roles: object) -> None:
    with pytest.raises(ValidationError):
        Settings(value_write_roles=roles)


def test_negative_cap_is_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(field_definition_limit_per_tenant=-1)
