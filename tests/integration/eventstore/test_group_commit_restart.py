"""PostgreSQL restarts under concurrent writers of one app (a private cluster, stopped
with ``fast`` so every pooled connection dies): the group commit recovers on its own,
each write answers (success, or 503 ``unavailable`` while the server is gone) within a
bound, never hangs, and every write after the restart succeeds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from application import User
from application.result import Result
from domain.custom_field_values import entity_stream_id
from infrastructure.bootstrap import bootstrap
from tests.e2e.workers.servers import PostgresCluster, running_cluster
from tests.integration.custom_fields.helpers import define, set_value
from tests.integration.projections.support import Failures, start
from tests.support.results import ok

log = logging.getLogger(__name__)
WRITERS = 6
DOWN = 3.0
BOUND = 120.0  # one write's longest answer: the store's retries while the server is gone


@pytest.fixture
def cluster() -> Iterator[PostgresCluster]:
    yield from running_cluster()


def test_writers_through_a_postgres_restart_get_answers_and_recover(
    cluster: PostgresCluster, tmp_path: Path
) -> None:
    app = bootstrap(
        database_url=cluster.url("w"), blob_dir=tmp_path / "blobs", project_inline=False
    )
    admin = User(id="a", tenant_id="t-restart", roles=frozenset({"TenantAdmin"}))
    try:
        ok(define(app, admin, "tier"))
        failures = Failures()
        stop = threading.Event()
        answers: list[list[tuple[float, float, Result]]] = [[] for _ in range(WRITERS)]

        def write(i: int) -> None:
            n = 0
            while not stop.is_set():
                began = time.monotonic()
                result = set_value(app, admin, f"c{i}", "tier", f"v{n}")
                answers[i].append((began, time.monotonic(), result))
                n += 1

        threads = [start(write, i, failures=failures) for i in range(WRITERS)]
        time.sleep(1.0)
        cluster.stop("fast")
        time.sleep(DOWN)
        cluster.start()
        back = time.monotonic()
        time.sleep(2.0)
        stop.set()
        for thread in threads:
            thread.join(timeout=BOUND + 30)
        assert not any(thread.is_alive() for thread in threads), "a writer hangs"
        assert not failures, failures.items[:5]  # no exception escaped app.write

        log.info(
            "writes: %d ok, %d unavailable",
            sum(r.is_success for a in answers for _, _, r in a),
            sum(not r.is_success for a in answers for _, _, r in a),
        )
        for i, mine in enumerate(answers):
            assert all(end - began < BOUND for began, end, _ in mine)
            for _, _, result in mine:
                assert result.is_success or (result.error and result.error.status == 503), result
            after = [r for began, _, r in mine if began > back + 0.5]
            assert after and all(r.is_success for r in after), (i, after[:3])
            stored = app.ctx.store.load(entity_stream_id(admin.tenant_id, "contact", f"c{i}"))
            # a 503 may hide a write that committed as the server went away: never fewer
            assert len(stored) >= sum(r.is_success for _, _, r in mine)
        ok(set_value(app, admin, "late", "tier", "after"))  # and the next caller alone
    finally:
        app.close()
