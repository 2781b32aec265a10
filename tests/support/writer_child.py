"""A child process of the several-process write test: one app on the test's store and
four threads writing values (each on entities of its own, and on a few entities every
writer shares), its outcomes answered on a queue."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from application import User
from infrastructure.bootstrap import bootstrap

THREADS = 4


def main(
    url: str, blob_dir: str, tenant: str, name: str, writes: int, shared: int, out: Any
) -> None:
    app = bootstrap(database_url=url, blob_dir=Path(blob_dir), allow_private_hosts=True)
    user = User(id=f"admin-{tenant}", tenant_id=tenant, roles=frozenset({"TenantAdmin"}))
    outcomes: list[tuple[str, str, str | None]] = []  # (entity, value, error code or None)
    lock = threading.Lock()

    def work(thread: int) -> None:
        for i in range(writes):
            value = f"{name}-{thread}-{i}"
            for entity in (value, f"shared-{i % shared}"):
                payload = {"entityName": "contact", "entityId": entity, "fieldKey": "note"}
                result = app.write("set-custom-field", {**payload, "value": value}, user)
                with lock:
                    outcomes.append(
                        (entity, value, None if result.error is None else result.error.code)
                    )

    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        out.put(outcomes)
    finally:
        app.close()
