"""list-mail-accounts in pages: cursor and limit, the filters applied before the page is
cut, totals, counts by status, and the caller's visibility kept (both backends)."""

from __future__ import annotations

from typing import Any

from application import User
from application.app import App
from tests.support.accounts import connect


def listed(app: App, user: User, **payload: Any) -> dict[str, Any]:
    result = app.query("list-mail-accounts", payload, user)
    assert result.error is None, result.error
    assert result.data is not None
    return result.data


def test_pages_filters_and_counts(app: App, admin: User) -> None:
    ids = [connect(app, admin, f"Box {n}") for n in range(7)]
    other = User(id="x", tenant_id="t-other", roles=frozenset({"TenantAdmin"}))
    connect(app, other, "Box of another tenant")
    assert app.write("disconnect-mail-account", {"accountId": ids[0]}, admin).is_success
    app.projections.catch_up()

    everything = listed(app, admin)
    assert len(everything["items"]) == 7 and everything["nextCursor"] is None
    assert everything["statusCounts"] == {"active": 6, "disconnected": 1}

    seen, cursor = [], None
    while True:
        page = listed(app, admin, limit=3, **({"cursor": cursor} if cursor else {}))
        assert page["total"] == 7 and len(page["items"]) <= 3
        seen += [a["accountId"] for a in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)

    found = listed(app, admin, search="box 3", limit=50)
    assert [a["displayName"] for a in found["items"]] == ["Box 3"] and found["total"] == 1
    assert listed(app, admin, search=ids[5][:13])["items"][0]["accountId"] == ids[5]
    assert listed(app, admin, search="another tenant")["items"] == []
    off = listed(app, admin, status="disconnected")
    assert [a["accountId"] for a in off["items"]] == [ids[0]]
    chosen = listed(app, admin, accountIds=[ids[2], ids[4], "nope"])
    assert sorted(a["accountId"] for a in chosen["items"]) == sorted([ids[2], ids[4]])
    assert listed(app, other, accountIds=[ids[2]])["items"] == []  # another tenant's: none
    beyond = listed(app, admin, cursor="100", limit=5)
    assert beyond["items"] == [] and beyond["nextCursor"] is None


def test_bad_paging_values_are_refused(app: App, admin: User) -> None:
    for payload in (
        {"limit": 0},
        {"limit": 1001},
        {"cursor": "-1"},
        {"cursor": "1e3"},
        {"search": "x" * 201},
        {"status": "deleted"},
        {"accountIds": ["a" * 65]},
        {"accountIds": ["a"] * 1001},
    ):
        result = app.query("list-mail-accounts", payload, admin)
        assert result.error is not None and result.error.status == 400, payload
