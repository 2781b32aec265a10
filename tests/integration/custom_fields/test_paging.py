"""list-entities: cursor paging without duplicates or misses, and ``where`` on searchable
fields only."""

from __future__ import annotations

from typing import Any

from application import User
from application.app import App
from tests.integration.custom_fields.helpers import (
    all_entities,
    define,
    delete,
    set_value,
)
from tests.support.results import failed, ok


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [item["entityId"] for item in items]


def test_pages_cover_every_entity_once_in_order(app: App, admin: User) -> None:
    ok(define(app, admin, "n", "number"))
    expected = sorted(f"c{i:02}" for i in range(23))
    for i, entity_id in enumerate(expected):
        ok(set_value(app, admin, entity_id, "n", i))
    app.projections.catch_up()
    for limit in (1, 5, 22, 23, 50):
        assert ids(all_entities(app, admin, limit=limit)) == expected
    first = ok(app.query("list-entities", {"entityName": "contact", "limit": 5}, admin))
    assert len(first["items"]) == 5 and first["nextCursor"]
    assert first["items"][0] == {"entityId": "c00", "customFields": {"n": 0}}
    default = ok(app.query("list-entities", {"entityName": "contact"}, admin))
    assert len(default["items"]) == 23 and default["nextCursor"] is None


def test_awkward_ids_page_without_duplicates_or_misses(app: App, admin: User) -> None:
    ok(define(app, admin, "n", "number"))
    awkward = [
        "a",
        "B",
        "b",
        "ä",
        "a b",
        "a-1",
        "a_1",
        "A",
        "Z9",
        "z",
        "10",
        "9",
        "ß",
        "é",
        "e",
        "日本",
        "x'y",
        'q"q',
        "%",
        "?",
    ]
    for entity_id in awkward:
        ok(set_value(app, admin, entity_id, "n", 1))
    app.projections.catch_up()
    whole = ids(all_entities(app, admin, limit=500))
    assert sorted(whole) == sorted(awkward)
    paged = ids(all_entities(app, admin, limit=1))
    assert paged == whole  # same order, each once, whatever the collation


def test_entities_written_between_pages_cause_no_duplicates_or_misses(
    app: App, admin: User
) -> None:
    ok(define(app, admin, "n", "number"))
    original = [f"c{i:02}" for i in range(0, 30, 2)]
    for entity_id in original:
        ok(set_value(app, admin, entity_id, "n", 0))
    app.projections.catch_up()
    seen: list[str] = []
    cursor = None
    step = 0
    while True:
        payload: dict[str, Any] = {"entityName": "contact", "limit": 4}
        if cursor:
            payload["cursor"] = cursor
        page = ok(app.query("list-entities", payload, admin))
        seen += ids(page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
        # meanwhile: new entities on both sides of the cursor, updates of seen ones,
        # and a field deleted from every entity
        step += 1
        ok(set_value(app, admin, f"c{2 * step + 1:02}", "n", step))
        ok(set_value(app, admin, "c00", "n", step))
        if step == 2:
            ok(define(app, admin, "tmp"))
            ok(set_value(app, admin, "c28", "tmp", "x"))
            ok(delete(app, admin, "tmp"))
        app.projections.catch_up()
    assert len(seen) == len(set(seen)), seen
    assert seen == sorted(seen)
    assert set(original) <= set(seen)


def test_where_filters_on_searchable_fields(app: App, admin: User, operator: User) -> None:
    ok(define(app, admin, "score", "number", searchable=True))
    ok(define(app, admin, "active", "boolean", searchable=True))
    ok(define(app, admin, "tier", "enum", options={"options": ["gold", "silver"]}, searchable=True))
    ok(define(app, admin, "note", "text"))
    ok(define(app, operator, "region", "text", searchable=True))
    for i in range(12):
        entity_id = f"c{i:02}"
        ok(set_value(app, admin, entity_id, "score", i % 3))
        ok(set_value(app, admin, entity_id, "active", i % 2 == 0))
        ok(set_value(app, admin, entity_id, "tier", "gold" if i < 4 else "silver"))
        ok(set_value(app, admin, entity_id, "note", "n"))
        ok(set_value(app, admin, entity_id, "region", "eu" if i % 4 == 0 else "us"))
    app.projections.catch_up()

    def where(**conditions: Any) -> list[str]:
        paged = ids(all_entities(app, admin, where=conditions, limit=2))
        assert paged == ids(all_entities(app, admin, where=conditions))
        return paged

    assert where(score=1) == ["c01", "c04", "c07", "c10"]
    assert where(active=True, score=0) == ["c00", "c06"]
    assert where(tier="gold") == ["c00", "c01", "c02", "c03"]
    assert where(region="eu") == ["c00", "c04", "c08"]  # a searchable system field
    assert where(score=7) == []
    assert where(score=1.0) == ["c01", "c04", "c07", "c10"]  # the same number, both backends
    assert where(score="1") == []  # no coercion in filters either
    assert where(active=1) == []

    details = failed(
        app.query(
            "list-entities", {"entityName": "contact", "where": {"note": "n", "nope": 1}}, admin
        ),
        "field_not_searchable",
        422,
    )
    assert details == {"fieldKeys": ["nope", "note"]}

    # searchable follows updates of the definition
    ok(
        app.write(
            "update-tenant-field",
            {
                "entityName": "contact",
                "fieldKey": "note",
                "field": {"type": "text"},
                "searchable": True,
            },
            admin,
        )
    )
    ok(
        app.write(
            "update-tenant-field",
            {"entityName": "contact", "fieldKey": "score", "field": {"type": "number"}},
            admin,
        )
    )
    app.projections.catch_up()
    assert len(where(note="n")) == 12
    failed(
        app.query("list-entities", {"entityName": "contact", "where": {"score": 1}}, admin),
        "field_not_searchable",
        422,
    )


def test_bad_cursors_and_limits(app: App, admin: User) -> None:
    payloads: list[dict[str, Any]] = [
        {"cursor": "%%%"},
        {"cursor": "eyJhIjoxfQ"},
        {"limit": 0},
        {"limit": 501},
        {"limit": "5"},
        {"where": []},
    ]
    for payload in payloads:
        failed(
            app.query("list-entities", {"entityName": "contact", **payload}, admin),
            "invalid_payload",
            400,
        )
    assert ok(app.query("list-entities", {"entityName": "contact", "limit": 500}, admin)) == {
        "items": [],
        "nextCursor": None,
    }
