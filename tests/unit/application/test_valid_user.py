"""The caller's ids pass the payload rules; the remembered answer is the same as the
first, and ids that cannot be remembered (not text) are checked every time."""

from __future__ import annotations

from typing import Any

import pytest

from application.app import _valid_user
from application.users import User


@pytest.mark.parametrize(
    ("user_id", "tenant_id", "roles", "valid"),
    [
        ("u", "t", {"TenantAdmin"}, True),
        ("u\ud800", "t", {"TenantAdmin"}, False),
        ("u", "t\x00", set(), False),
        ("u", "t", {"TenantAdmin\x00"}, False),
        (["u"], "t", set(), True),  # unhashable, yet a JSON value: checked, not remembered
        ({"k": "\ud800"}, "t", set(), False),
        ("u", float("nan"), set(), False),
    ],
)
def test_ids_are_checked_and_the_remembered_answer_is_the_same(
    user_id: Any, tenant_id: Any, roles: set[str], valid: bool
) -> None:
    user = User(id=user_id, tenant_id=tenant_id, roles=frozenset(roles))
    assert _valid_user(user) is valid
    assert _valid_user(user) is valid
