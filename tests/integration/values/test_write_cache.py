"""The write cache on both backends, with two apps on one store (two processes): what
one app cached never makes the other's changes invisible. A definition deleted, or
re-defined with another type, after the first app cached it: the first app's next set
answers as it would without a cache. Two apps writing the same entity lose no update.
The cache stays bounded."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from uuid import UUID

import pytest

from application import User
from application.app import App
from application.custom_fields.write_cache import WriteCache
from domain.custom_field_values import CustomFieldValueSet, entity_stream_id
from domain.events import DomainEvent
from domain.field_definition import definition_id
from tests.integration.custom_fields.helpers import clear, define, delete, fields_of, set_value
from tests.integration.eventstore.test_eventstore import store_of
from tests.integration.projections.support import Failures, start
from tests.support.results import ok


def entity_events(app: App, user: User, entity_id: str) -> list[CustomFieldValueSet]:
    events = store_of(app).load(entity_stream_id(user.tenant_id, "contact", entity_id))
    return [e for e in events if isinstance(e, CustomFieldValueSet)]


def test_a_definition_deleted_by_another_app_is_refused_after_it_was_cached(
    make_app: Callable[..., App], admin: User
) -> None:
    first, second = make_app(), make_app()
    ok(define(first, admin, "tier"))
    ok(set_value(first, admin, "c1", "tier", "gold"))  # caches the definition and c1
    ok(delete(second, admin, "tier"))
    refused = set_value(first, admin, "c1", "tier", "silver")
    assert refused.error is not None and refused.error.status == 404
    refused = set_value(first, admin, "c2", "tier", "silver")  # an entity not cached
    assert refused.error is not None and refused.error.status == 404
    assert [e.sealed for e in entity_events(first, admin, "c1")][1:] == []
    assert entity_events(first, admin, "c2") == []


def test_a_type_changed_by_another_app_validates_under_the_new_definition(
    make_app: Callable[..., App], admin: User
) -> None:
    first, second = make_app(), make_app()
    ok(define(first, admin, "size"))
    ok(set_value(first, admin, "c1", "size", "large"))
    ok(delete(second, admin, "size"))
    ok(define(second, admin, "size", "number"))
    refused = set_value(first, admin, "c1", "size", "large")
    assert refused.error is not None
    assert refused.error.code == "custom_field_value_invalid"
    assert ok(set_value(first, admin, "c1", "size", 7))["value"] == 7
    written = entity_events(first, admin, "c1")
    assert [e.generation for e in written] == [1, 2]


def test_a_definition_made_by_another_app_is_seen_after_a_cached_refusal(
    make_app: Callable[..., App], admin: User
) -> None:
    first, second = make_app(), make_app()
    refused = set_value(first, admin, "c1", "late", "x")  # caches "no definition"
    assert refused.error is not None and refused.error.status == 404
    ok(define(second, admin, "late"))
    assert ok(set_value(first, admin, "c1", "late", "x"))["value"] == "x"


def test_write_roles_narrowed_by_another_app_refuse_a_member(
    make_app: Callable[..., App], admin: User, member: User
) -> None:
    first, second = make_app(), make_app()
    ok(define(first, admin, "tier"))
    ok(set_value(first, member, "c1", "tier", "gold"))
    ok(
        second.write(
            "update-tenant-field",
            {
                "entityName": "contact",
                "fieldKey": "tier",
                "field": {"type": "text", "fieldAccess": {"write": ["TenantAdmin"]}},
            },
            admin,
        )
    )
    refused = set_value(first, member, "c1", "tier", "silver")
    assert refused.error is not None and refused.error.code == "field_access_denied"
    assert len(entity_events(first, admin, "c1")) == 1


def test_a_value_set_by_another_app_is_cleared_by_one_that_cached_the_entity_without_it(
    make_app: Callable[..., App], admin: User
) -> None:
    first, second = make_app(), make_app()
    ok(define(first, admin, "tier"))
    ok(define(first, admin, "note"))
    ok(set_value(first, admin, "c1", "note", "n"))  # caches c1, without a tier
    ok(set_value(second, admin, "c1", "tier", "gold"))
    assert ok(clear(first, admin, "c1", "tier"))["cleared"] is True
    assert ok(clear(first, admin, "c1", "tier"))["cleared"] is False


def test_an_entity_written_by_another_app_after_it_was_cached_loses_no_update(
    make_app: Callable[..., App], admin: User
) -> None:
    first, second = make_app(), make_app()
    ok(define(first, admin, "a"))
    ok(define(first, admin, "b"))
    ok(set_value(first, admin, "c1", "a", "1"))  # first caches c1 at version 1
    ok(set_value(second, admin, "c1", "b", "2"))  # version 2, behind first's back
    ok(set_value(first, admin, "c1", "a", "3"))  # collides, reads afresh, lands at 3
    assert [(e.field_key, e.originator_version) for e in entity_events(first, admin, "c1")] == [
        ("a", 1),
        ("b", 2),
        ("a", 3),
    ]


def test_an_entity_another_app_made_is_not_taken_as_new_by_one_that_never_saw_it(
    make_app: Callable[..., App], admin: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = make_app(), make_app()
    ok(define(first, admin, "a"))
    ok(define(first, admin, "b"))
    ok(set_value(first, admin, "c0", "a", "0"))  # first caches the definitions, not c1
    ok(set_value(second, admin, "c1", "b", "2"))  # c1 exists, behind first's back
    store = store_of(first)
    reads: list[list[object]] = []
    load_many = store.load_many

    def counted(streams: Iterable[UUID]) -> dict[UUID, list[DomainEvent]]:
        reads.append(list(streams))
        return load_many(streams)

    monkeypatch.setattr(store, "load_many", counted)
    ok(set_value(first, admin, "c2", "a", "new"))  # a new entity: no read at all
    assert reads == []
    ok(set_value(first, admin, "c1", "a", "1"))  # taken as new, refused, read afresh
    assert [(e.field_key, e.originator_version) for e in entity_events(first, admin, "c1")] == [
        ("b", 1),
        ("a", 2),
    ]
    assert len(reads) == 1
    first.projections.catch_up()
    assert fields_of(first, admin, "c1") == {"a": "1", "b": "2"}


def test_threads_taking_one_unseen_entity_as_new_lose_no_update(
    make_app: Callable[..., App], admin: User
) -> None:
    first, second = make_app(), make_app()
    keys = [f"k{n}" for n in range(6)]
    for key in keys:
        ok(define(first, admin, key))
    ok(set_value(first, admin, "warm", keys[0], "w"))  # definitions cached
    ok(set_value(second, admin, "shared", keys[0], "old"))  # exists; first never saw it
    failures = Failures()
    barrier = threading.Barrier(len(keys))
    landed: list[str] = []

    def write(n: int) -> None:
        barrier.wait()
        result = set_value(first, admin, "shared", keys[n], f"v{n}")
        if result.is_success:
            landed.append(keys[n])
        elif result.error is None or result.error.status != 409:  # 409: lost every retry
            failures.add(f"{keys[n]}: {result.error}")

    threads = [start(write, n, failures=failures) for n in range(len(keys))]
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures.items
    written = entity_events(first, admin, "shared")
    assert [e.originator_version for e in written] == list(range(1, len(landed) + 2))
    assert sorted(e.field_key for e in written[1:]) == sorted(landed)
    assert landed


def test_two_apps_writing_one_entity_concurrently_lose_no_update(
    make_app: Callable[..., App], admin: User
) -> None:
    apps = [make_app(), make_app()]
    keys = [f"k{n}" for n in range(6)]
    for key in keys:
        ok(define(apps[0], admin, key))
    failures = Failures()
    barrier = threading.Barrier(len(keys))
    landed: dict[str, list[str]] = {key: [] for key in keys}

    def write(n: int) -> None:
        barrier.wait()
        for i in range(12):
            value = f"{keys[n]}-{i}"
            result = set_value(apps[n % 2], admin, "shared", keys[n], value)
            if result.is_success:
                landed[keys[n]].append(value)
            elif result.error is None or result.error.status != 409:
                failures.add(f"{keys[n]}: {result.error}")

    threads = [start(write, n, failures=failures) for n in range(len(keys))]
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures.items
    written = entity_events(apps[0], admin, "shared")
    assert [e.originator_version for e in written] == list(range(1, len(written) + 1))
    assert sum(len(values) for values in landed.values()) == len(written)
    assert sum(len(values) for values in landed.values()) > len(keys)
    for key in keys:  # each key's successful writes, and nothing else
        assert len([e for e in written if e.field_key == key]) == len(landed[key])
    apps[1].projections.catch_up()
    assert fields_of(apps[1], admin, "shared") == {
        key: values[-1] for key, values in landed.items() if values
    }


def test_the_cache_stays_bounded_with_many_entities(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app()
    app.ctx = dataclasses.replace(app.ctx, write_cache=WriteCache(max_entities=20))
    ok(define(app, admin, "tier"))
    for n in range(70):
        ok(set_value(app, admin, f"c{n}", "tier", str(n)))
    entities, _, definitions = app.ctx.write_cache.sizes()
    assert entities == 20
    assert definitions == 2  # the tenant's definition and the system's (none)
    ok(set_value(app, admin, "c0", "tier", "again"))  # evicted long ago: read afresh
    assert [e.originator_version for e in entity_events(app, admin, "c0")] == [1, 2]


def test_the_cache_stays_bounded_in_bytes_with_large_values(
    make_app: Callable[..., App], admin: User
) -> None:
    app = make_app()
    app.ctx = dataclasses.replace(app.ctx, write_cache=WriteCache(max_entity_bytes=200_000))
    ok(define(app, admin, "bio"))
    for n in range(12):
        ok(set_value(app, admin, f"c{n}", "bio", "x" * 40_000))  # ~54 KB sealed each
    entities, held, _ = app.ctx.write_cache.sizes()
    assert held <= 200_000
    assert 1 <= entities <= 4
    app.ctx = dataclasses.replace(app.ctx, write_cache=WriteCache(max_entity_bytes=30_000))
    ok(set_value(app, admin, "c0", "bio", "y" * 40_000))  # past the bound alone: not kept
    assert app.ctx.write_cache.sizes()[:2] == (0, 0)
    ok(set_value(app, admin, "c0", "bio", "short"))
    assert app.ctx.write_cache.sizes()[0] == 1


def test_an_apps_own_define_update_and_delete_drop_its_cached_definition(
    app: App, admin: User
) -> None:
    cache = app.ctx.write_cache
    tenant_stream = definition_id(admin.tenant_id, "contact", "tier")
    ok(define(app, admin, "tier"))
    ok(set_value(app, admin, "c1", "tier", "gold"))
    assert cache.definitions([tenant_stream]) is not None
    ok(
        app.write(
            "update-tenant-field",
            {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}},
            admin,
        )
    )
    assert cache.definitions([tenant_stream]) is None
    ok(set_value(app, admin, "c1", "tier", "silver"))
    ok(delete(app, admin, "tier"))
    assert cache.definitions([tenant_stream]) is None
    refused = set_value(app, admin, "c1", "tier", "bronze")
    assert refused.error is not None and refused.error.status == 404
