"""Replay regression (docs/projections.md): recorded event logs in, the same query answers out.

Each ``fixtures/<name>.jsonl`` is imported into a fresh store on every backend, the
projections catch up, and the answers to ``fixtures/<name>.queries.json`` are compared
with ``golden/<name>.json``. The same queries are asked again after a rebuild from
position 0 (same answers), then the ``afterwards`` steps run — writes and queries on
top of the replayed history, which exercise the upcasters on the write side too.

Regenerate golden files (on SQLite; PostgreSQL must then agree with them)::

    TIDINGS_UPDATE_GOLDEN=1 python -m pytest tests/replay
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from application import User
from application.app import App
from infrastructure.bootstrap import event_store
from infrastructure.eventstore.jsonl import export_events, import_events

HERE = Path(__file__).parent
FIXTURES = sorted(p.stem for p in (HERE / "fixtures").glob("*.jsonl"))
UPDATE = os.environ.get("TIDINGS_UPDATE_GOLDEN") == "1"
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def load_spec(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads((HERE / "fixtures" / f"{name}.queries.json").read_text())
    names = [step["name"] for part in ("queries", "afterwards") for step in spec.get(part, [])]
    assert len(names) == len(set(names)), f"step names repeat in {name}.queries.json"
    return spec


def answer(app: App, step: dict[str, Any], users: dict[str, User]) -> dict[str, Any]:
    user = users[step["as"]]
    if "write" in step:
        result = app.write(step["write"], step["payload"], user)
    else:
        app.projections.catch_up()
        result = app.query(step["query"], step["payload"], user)
    if result.error is None:
        return {"data": result.data}
    error = result.error
    return {
        "error": {
            "status": error.status,
            "code": error.code,
            "message": error.message,
            "details": error.details,
        }
    }


def run(app: App, steps: list[dict[str, Any]], users: dict[str, User]) -> dict[str, Any]:
    return {step["name"]: answer(app, step, users) for step in steps}


def replay(app: App, name: str) -> None:
    with (HERE / "fixtures" / f"{name}.jsonl").open(encoding="utf-8") as lines:
        import_events(event_store(app), lines)
    app.projections.catch_up()


@pytest.mark.parametrize("name", FIXTURES)
def test_replayed_answers_match_golden(
    name: str, database_url: str, make_app: Callable[..., App], tmp_path: Path
) -> None:
    spec = load_spec(name)
    users = {
        key: User(id=u["id"], tenant_id=u["tenantId"], roles=frozenset(u["roles"]))
        for key, u in spec["users"].items()
    }
    app = make_app(blob_dir=tmp_path / "blobs")
    replay(app, name)

    queries = run(app, spec["queries"], users)
    app.projections.rebuild()
    assert run(app, spec["queries"], users) == queries, "a rebuild changed the answers"
    got = {"queries": queries, "afterwards": run(app, spec.get("afterwards", []), users)}

    golden = HERE / "golden" / f"{name}.json"
    text = json.dumps(got, indent=2, ensure_ascii=False) + "\n"
    assert not TIMESTAMP.search(text), "answers hold a timestamp: golden files must be stable"
    if UPDATE and database_url.startswith("sqlite"):
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"no golden file; run with TIDINGS_UPDATE_GOLDEN=1 to record {golden}"
    assert json.loads(text) == json.loads(golden.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", FIXTURES)
def test_import_then_export_gives_the_fixture_back(
    name: str, make_app: Callable[..., App], tmp_path: Path
) -> None:
    """States are stored byte for byte as imported, old shapes included."""
    app = make_app(blob_dir=tmp_path / "blobs")
    replay(app, name)
    exported = tmp_path / "exported.jsonl"
    with exported.open("w", encoding="utf-8") as out:
        export_events(event_store(app), out)

    def records(path: Path) -> list[dict[str, Any]]:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return [{k: v for k, v in row.items() if k != "position"} for row in rows]

    assert records(exported) == records(HERE / "fixtures" / f"{name}.jsonl")
