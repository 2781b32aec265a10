"""Appends that name streams they decided on (``expected``), on both backends: checked
inside the write's transaction, a stale caller fails alone (``StaleRead``) and writes
nothing, also when it shares a batch with callers whose reads hold."""

from __future__ import annotations

import time
from collections.abc import Callable
from uuid import uuid4

import psycopg
import pytest

from application.app import App
from application.errors import StaleRead
from infrastructure.eventstore.typed_array import CHECKED_INSERT_FUNCTION
from infrastructure.sql.database import DatabaseUrl
from tests.integration.eventstore.test_eventstore import event, store_of
from tests.integration.eventstore.test_group_commit import appending, writes_held


def test_an_append_whose_checked_stream_moved_is_refused_and_writes_nothing(app: App) -> None:
    store = store_of(app)
    decided, target = uuid4(), uuid4()
    store.append([event(decided, 1)])
    with pytest.raises(StaleRead):
        store.append([event(target, 1)], {decided: 0})  # read before the stream's event
    with pytest.raises(StaleRead):
        store.append([event(target, 1)], {decided: 2})
    assert store.load(target) == []
    store.append([event(target, 1)], {decided: 1, uuid4(): 0})  # an empty stream is at 0
    assert len(store.load(target)) == 1


def test_a_stale_caller_fails_alone_inside_a_shared_batch(app: App, database_url: str) -> None:
    store = store_of(app)
    decided = uuid4()
    store.append([event(decided, 1)])
    fresh = [uuid4() for _ in range(5)]
    stale_target = uuid4()
    with writes_held(database_url):
        leader = appending(store, [event(uuid4(), 1)], {decided: 1})
        time.sleep(0.5)
        results = [appending(store, [event(s, 1)], {decided: 1}) for s in fresh[:2]]
        results.append(appending(store, [event(stale_target, 1)], {decided: 0}))
        results += [appending(store, [event(s, 1)], {decided: 1}) for s in fresh[2:]]
        time.sleep(1.0)
    assert leader() is None
    outcomes = [result() for result in results]
    assert [type(o).__name__ for o in outcomes] == [
        "NoneType",
        "NoneType",
        "StaleRead",
        "NoneType",
        "NoneType",
        "NoneType",
    ]
    assert all(len(store.load(s)) == 1 for s in fresh)
    assert store.load(stale_target) == []


def test_a_caller_is_stale_when_its_batch_writes_a_stream_it_checked(
    app: App, database_url: str
) -> None:
    store = store_of(app)
    decided, target = uuid4(), uuid4()
    with writes_held(database_url):
        leader = appending(store, [event(uuid4(), 1)], {})
        time.sleep(0.5)
        writer = appending(store, [event(decided, 1)], {})
        checker = appending(store, [event(target, 1)], {decided: 0})
        time.sleep(1.0)
    assert leader() is None
    assert writer() is None
    assert isinstance(checker(), StaleRead)
    assert store.load(target) == []
    assert len(store.load(decided)) == 1


def _function_row_version(database_url: str) -> str | None:
    url = DatabaseUrl.parse(database_url)
    with psycopg.connect(url.conninfo) as conn:
        row = conn.execute(
            "SELECT p.xmin::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname = %s",
            (url.schema, CHECKED_INSERT_FUNCTION),
        ).fetchone()
    return None if row is None else str(row[0])


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_the_insert_function_is_created_once_and_left_as_it_is_by_later_apps(
    make_app: Callable[..., App], database_url: str
) -> None:
    # Several processes start at once in production: re-creating the function each time
    # would race (CREATE OR REPLACE fails with "tuple concurrently updated").
    first = make_app()
    created = _function_row_version(database_url)
    assert created is not None
    later = [make_app() for _ in range(2)]
    assert _function_row_version(database_url) == created
    for app in (first, *later):
        stream = uuid4()
        store_of(app).append([event(stream, 1)], {uuid4(): 0})
        assert len(store_of(app).load(stream)) == 1
