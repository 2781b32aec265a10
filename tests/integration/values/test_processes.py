"""Four processes of four threads writing values into one store, on both backends (the
shape of a host application with several worker processes): every accepted write is in
the log exactly once, a shared entity's stream has no gap and no twice-taken version,
the read models saw every event, and a rebuild answers the same."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from application import User
from application.app import App
from application.ports import Recorded
from domain.custom_field_values import CustomFieldValueSet, entity_stream_id
from infrastructure.eventstore.recorder import RecorderEventStore
from tests.integration.custom_fields.helpers import define, fields_of, snapshot
from tests.integration.eventstore.test_eventstore import store_of
from tests.support import writer_child

PROCESSES, WRITES, SHARED = 4, 12, 3


def test_four_processes_of_four_threads_write_every_value_once(
    make_app: Callable[..., App], database_url: str, tmp_path: Path, admin: User
) -> None:
    app = make_app()  # creates the store and the master key the children share
    assert define(app, admin, "note").is_success
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    children = [
        ctx.Process(
            target=writer_child.main,
            args=(
                database_url,
                str(tmp_path / "blobs"),
                admin.tenant_id,
                f"p{n}",
                WRITES,
                SHARED,
                out,
            ),
        )
        for n in range(PROCESSES)
    ]
    for child in children:
        child.start()
    outcomes = [row for _ in children for row in out.get(timeout=240)]
    for child in children:
        child.join(60)
        assert child.exitcode == 0

    per_process = WRITES * writer_child.THREADS * 2
    assert len(outcomes) == PROCESSES * per_process
    refused = Counter(code for _, _, code in outcomes if code is not None)
    assert set(refused) <= {"version_conflict"}, refused
    accepted = [(entity, value) for entity, value, code in outcomes if code is None]
    own = [(entity, value) for entity, value in accepted if not entity.startswith("shared-")]
    assert len(own) == PROCESSES * per_process // 2  # an entity of one's own never conflicts

    store = store_of(app)
    for n in range(SHARED):
        stream = store.load(entity_stream_id(admin.tenant_id, "contact", f"shared-{n}"))
        versions = [event.originator_version for event in stream]
        assert versions == list(range(1, len(versions) + 1))  # no gap, none taken twice
        writes_to_it = sum(1 for entity, _ in accepted if entity == f"shared-{n}")
        assert len(stream) == writes_to_it  # each accepted write once, nothing else

    app.projections.catch_up()
    for entity, value in own[:: max(1, len(own) // 20)]:
        assert fields_of(app, admin, entity) == {"note": value}
    sets = sum(isinstance(r.event, CustomFieldValueSet) for r in _log(store))
    assert sets == len(accepted)
    before = snapshot(app, [admin], entity_ids=[f"shared-{n}" for n in range(SHARED)])
    app.projections.rebuild()
    assert snapshot(app, [admin], entity_ids=[f"shared-{n}" for n in range(SHARED)]) == before


def _log(store: RecorderEventStore) -> list[Recorded]:
    entries: list[Recorded] = []
    while page := store.read(entries[-1].position if entries else 0, 1000):
        entries += page
    return entries
