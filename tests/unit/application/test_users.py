"""Roles are resolved when a ``User`` is made: SystemAdmin only in the system tenant."""

from __future__ import annotations

from application import SYSTEM_TENANT_ID, User


def test_system_admin_counts_only_in_the_system_tenant() -> None:
    assert User("op", SYSTEM_TENANT_ID, frozenset({"SystemAdmin"})).roles == {"SystemAdmin"}
    assert User("op", "t-1", frozenset({"SystemAdmin", "TenantMember"})).roles == {"TenantMember"}
    assert User("op", "system-x", frozenset({"SystemAdmin"})).roles == frozenset()
