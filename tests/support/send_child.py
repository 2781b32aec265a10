"""A worker process for the crash tests: it runs one attempt on an outbound message and,
once the SMTP server accepted the message (its 250 after DATA), prints ``accepted`` and
blocks before the outcome is recorded, so the test can kill -9 it at exactly that point.

Run as ``python -m tests.support.send_child DATABASE_URL BLOB_DIR MASTER_KEY CA_FILE
OUTBOUND_ID``; the attempt's claim lasts ``LEASE`` seconds.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import replace
from typing import Any

from application.mail.outbound.ports import SmtpReply, SmtpSubmission
from infrastructure.bootstrap import bootstrap
from infrastructure.bootstrap_workers import build_outbound_delivery
from infrastructure.runtime.settings import Settings

LEASE = 3.0


class StopAfterAccepted:
    def __init__(self, inner: SmtpSubmission) -> None:
        self._inner = inner

    def send(self, *args: Any, **kwargs: Any) -> SmtpReply:
        reply = self._inner.send(*args, **kwargs)
        print("accepted", flush=True)
        threading.Event().wait()  # until killed
        return reply

    def close_idle(self) -> int:
        return 0

    def close(self) -> None:
        pass


def main(database_url: str, blob_dir: str, master_key: str, ca_file: str, outbound: str) -> None:
    settings = Settings(
        database_url=database_url,
        blob_dir=blob_dir,
        master_key=master_key,
        allow_private_hosts=True,
        project_inline=False,
        smtp_ca_file=ca_file,
    )
    app = bootstrap(settings)
    delivery = build_outbound_delivery(app, settings, "doomed-worker")
    delivery.smtp = StopAfterAccepted(delivery.smtp)
    delivery.settings = replace(delivery.settings, attempt_timeout=LEASE / 2, lease_margin=0.0)
    delivery.run(outbound)


if __name__ == "__main__":
    main(*sys.argv[1:6])
