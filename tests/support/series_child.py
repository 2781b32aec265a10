"""A worker process for the crash test of a series: it sends an account's queued
messages as one series whose write of the second message's claim (with the first
one's ``sent``: a write to two streams) never ends; it prints ``held`` when that write
starts, so the test can kill -9 it while the second message's bytes are out and its
end of data is held.

Run as ``python -m tests.support.series_child DATABASE_URL BLOB_DIR MASTER_KEY CA_FILE
ACCOUNT_ID OUTBOUND_ID...``; the attempts' claims last ``LEASE`` seconds; ``SERIES_LANES`` (1
unless set) SMTP sessions at once, each lane holding its own write.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from uuid import UUID

from domain.events import DomainEvent
from infrastructure.bootstrap import bootstrap
from infrastructure.bootstrap_workers import build_outbound_delivery
from infrastructure.runtime.settings import Settings

LEASE = 3.0


def main(
    database_url: str, blob_dir: str, master_key: str, ca_file: str, account: str, *ids: str
) -> None:
    settings = Settings(
        database_url=database_url,
        blob_dir=blob_dir,
        master_key=master_key,
        allow_private_hosts=True,
        project_inline=False,
        smtp_ca_file=ca_file,
        provider_limits={
            "127.0.0.1": {
                "name": "local",
                "saves_sent": True,
                "send_connections": int(os.environ.get("SERIES_LANES", "1")),
            }
        },
    )
    app = bootstrap(settings)
    delivery = build_outbound_delivery(app, settings, "doomed-series")
    delivery.settings = replace(delivery.settings, attempt_timeout=LEASE / 2, lease_margin=0.0)
    store = app.ctx.store
    append = store.append

    def held(events: Sequence[DomainEvent], expected: Mapping[UUID, int] | None = None) -> None:
        if len({event.originator_id for event in events}) == 2:
            print("held", flush=True)
            threading.Event().wait()  # until killed
        append(events, expected)

    store.append = held  # type: ignore[method-assign]
    waiting = deque(ids)
    delivery.run_series(account, lambda: waiting.popleft() if waiting else None)


if __name__ == "__main__":
    main(*sys.argv[1:])
